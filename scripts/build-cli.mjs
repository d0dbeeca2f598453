// The CLI that bin/vmop runs (scripts/provision.sh): src/cli/main.ts bundled by esbuild into
// dist/cli/, with the Kubernetes client inlined. Loading the client's 967 files was most of the
// CPU a `vmop vm …` took to start (2.3 s of it, bundled 1.1 s: the tests run hundreds, and the local
// beds' managers run from here too). Other packages stay in node_modules (bullmq, for one, reads
// files beside its own). No type check: that is npm run typecheck's.
//
// dist/cli/ is two folders below the checkout, as src/cli/ is: modules that find the checkout's
// files from their own URL (web pages, chart files, scripts) find them from the bundle too.
import * as esbuild from 'esbuild';

const INLINED = /^@kubernetes\/client-node(\/|$)/;

await esbuild.build({
  entryPoints: ['src/cli/main.ts'],
  outdir: 'dist/cli',
  bundle: true,
  // Each command's module stays a chunk of its own, loaded only when that command runs.
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  logLevel: 'warning',
  // The inlined client's CommonJS dependencies call require.
  banner: {
    js: "import { createRequire as createRequireForBundle } from 'node:module'; const require = createRequireForBundle(import.meta.url);",
  },
  plugins: [
    {
      name: 'only-the-kubernetes-client-inlined',
      setup(build) {
        build.onResolve({ filter: /^[^./]/ }, (args) => {
          const fromInlinedPackage = args.importer.includes('/node_modules/');
          if (!args.path.startsWith('node:') && (INLINED.test(args.path) || fromInlinedPackage))
            return undefined;
          return { external: true };
        });
      },
    },
  ],
});
