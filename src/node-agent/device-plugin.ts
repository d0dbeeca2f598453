// A device plugin (kubelet's device plugin API) that gives one host device, e.g. /dev/kvm, to
// unprivileged pods as an extended resource: a pod asking for `devices.vmop.jdrupes.org/kvm: 1`
// gets the device node in its container, owned by its user where the runtime is configured so
// (device_ownership_from_security_context). Many pods share the device: it is advertised as
// `count` interchangeable slots, as KubeVirt's virt-handler does for /dev/kvm.
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import {
  Server,
  ServerCredentials,
  credentials,
  type ServerUnaryCall,
  type ServerWritableStream,
  type sendUnaryData,
} from '@grpc/grpc-js';
import type { Logger } from '../util/logger.js';
import {
  API_VERSION,
  DevicePlugin,
  KUBELET_SOCKET,
  Registration,
  type AllocateRequest,
  type Device,
} from './device-plugin-api.js';

export interface HostDevice {
  /** The extended resource, e.g. devices.vmop.jdrupes.org/kvm. */
  resource: string;
  /** The device node on the host, given to the container at the same path. */
  path: string;
  /** Where this process sees the host's device node (a DaemonSet mounts the host's /dev elsewhere). */
  seenAt?: string;
  /** How many pods of a node may have it at once. */
  count: number;
}

export interface DevicePluginOptions {
  /** kubelet's device-plugins directory (DEVICE_PLUGIN_DIR on every node). */
  dir: string;
  device: HostDevice;
  logger: Logger;
  /** How often the plugin checks its socket (kubelet removes it when it restarts) and the device. */
  checkEveryMs?: number;
}

/** The devices kubelet is told of: none while the host has no such device node. */
export function advertisedDevices(device: HostDevice, present: boolean): Device[] {
  if (!present) return [];
  return Array.from({ length: device.count }, (_, i) => ({
    ID: `${path.basename(device.path)}-${i}`,
    health: 'Healthy',
  }));
}

/** Serves the plugin and keeps it registered with kubelet until stopped. */
export async function runDevicePlugin(options: DevicePluginOptions): Promise<{ stop(): Promise<void> }> {
  const { dir, device, logger } = options;
  const name = device.resource.slice(device.resource.lastIndexOf('/') + 1);
  const socket = path.join(dir, `vmop-${name}.sock`);
  const log = logger.child({ resource: device.resource });
  const seenAt = device.seenAt ?? device.path;
  let present = existsSync(seenAt);
  const watchers = new Set<ServerWritableStream<unknown, { devices: Device[] }>>();
  const announce = () => {
    for (const call of watchers) call.write({ devices: advertisedDevices(device, present) });
  };

  const implementation = {
    GetDevicePluginOptions: (_call: ServerUnaryCall<unknown, unknown>, done: sendUnaryData<object>) =>
      done(null, { pre_start_required: false, get_preferred_allocation_available: false }),
    ListAndWatch(call: ServerWritableStream<unknown, { devices: Device[] }>) {
      watchers.add(call);
      call.on('cancelled', () => watchers.delete(call));
      call.on('close', () => watchers.delete(call));
      call.write({ devices: advertisedDevices(device, present) });
    },
    Allocate(call: ServerUnaryCall<AllocateRequest, unknown>, done: sendUnaryData<object>) {
      const spec = { container_path: device.path, host_path: device.path, permissions: 'rw' };
      done(null, { container_responses: call.request.container_requests.map(() => ({ devices: [spec] })) });
    },
    GetPreferredAllocation: (_call: ServerUnaryCall<unknown, unknown>, done: sendUnaryData<object>) =>
      done(null, { container_responses: [] }),
    PreStartContainer: (_call: ServerUnaryCall<unknown, unknown>, done: sendUnaryData<object>) =>
      done(null, {}),
  };

  let server: Server | undefined;
  let registered = false;
  const serve = async () => {
    server?.forceShutdown();
    await rm(socket, { force: true });
    server = new Server();
    server.addService(DevicePlugin.service, implementation);
    await new Promise<void>((resolve, reject) =>
      server!.bindAsync(`unix://${socket}`, ServerCredentials.createInsecure(), (err) =>
        err ? reject(err) : resolve(),
      ),
    );
  };
  const register = () =>
    new Promise<void>((resolve, reject) => {
      const kubelet = new Registration(
        `unix://${path.join(dir, KUBELET_SOCKET)}`,
        credentials.createInsecure(),
      );
      const request = {
        version: API_VERSION,
        endpoint: path.basename(socket),
        resource_name: device.resource,
        options: {},
      };
      kubelet.Register!(request, { deadline: Date.now() + 5000 }, (err: Error | null) => {
        kubelet.close();
        if (err) reject(err);
        else resolve();
      });
    });

  // kubelet removes every plugin's socket when it (re)starts: serve again and register again.
  const keepRegistered = async () => {
    if (registered && existsSync(socket)) return;
    try {
      await serve();
      await register();
      registered = true;
      log.info({ socket, present, path: device.path }, 'registered with kubelet');
    } catch (err) {
      registered = false;
      log.warn({ err: (err as Error).message }, 'could not register with kubelet yet; trying again');
    }
  };
  await keepRegistered();
  let checking = false;
  const timer = setInterval(() => {
    if (checking) return;
    checking = true;
    const now = existsSync(seenAt);
    if (now !== present) {
      present = now;
      log.info({ present }, `${device.path} ${present ? 'appeared' : 'is gone'}`);
      announce();
    }
    void keepRegistered().finally(() => (checking = false));
  }, options.checkEveryMs ?? 2000);

  return {
    async stop() {
      clearInterval(timer);
      for (const call of watchers) call.end();
      server?.forceShutdown();
      await rm(socket, { force: true });
    },
  };
}
