// `vmop image`: a person's verbs for VirtualMachineImages on any cluster (through the kubeconfig,
// with the person's own RBAC). `upload` sends a disk image file into a new image.
import { Command, Option } from 'commander';
import { cliAction, context, parseTimeout, type KubeCliOptions } from './cli-context.js';
import { uploadImage, type UploadCliOptions } from './image-upload.js';

const action = cliAction('vmop image');

export function register(program: Command): void {
  const image = program
    .command('image')
    .description('Disk images (VirtualMachineImages) that VM disks are filled from')
    .option('--kubeconfig <file>', 'kubeconfig (default: $KUBECONFIG or ~/.kube/config)')
    .option('-n, --namespace <namespace>', "namespace (default: the context's, else default)");
  const upload = image
    .command('upload <file>')
    .description(
      'Send a raw or qcow2 image file (plain, xz or gzip) into a new VirtualMachineImage, resumably, through the apiserver',
    )
    .requiredOption('--name <name>', "the image's name (run again with it to go on after a break)")
    .option('--size <quantity>', "its claim's size (default: the disk's size; needed for a compressed file)")
    .option('--storage-class <class>', "its claim's StorageClass (default: the cluster's)")
    .option('--no-wait', 'return once the file is sent, not when the image is Ready')
    .addOption(
      new Option('-t, --timeout <duration>', 'how long to wait for the importer and the import')
        .default(30 * 60_000, '30m')
        .argParser(parseTimeout),
    );
  upload.action(
    action((file: string) => {
      const options = upload.optsWithGlobals<KubeCliOptions & UploadCliOptions>();
      const { kubeConfig, api, core, namespace } = context(options);
      return uploadImage(kubeConfig, api, core, namespace, file, options);
    }),
  );
}
