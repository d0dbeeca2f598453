import { z } from 'zod';

/** Data of the QMP events the runner acts on (qemu-qmp-ref); other fields are ignored. */

export const ShutdownData = z.object({ guest: z.boolean(), reason: z.string() });

export const BalloonChangeData = z.object({ actual: z.number() });

export const TrayMovedData = z.object({
  device: z.string(),
  id: z.string(),
  'tray-open': z.boolean(),
});

export const VserportChangeData = z.object({ id: z.string(), open: z.boolean() });

const SpiceBasicInfo = z.object({ host: z.string(), port: z.string(), family: z.string() });
export const SpiceConnectionData = z.object({ server: SpiceBasicInfo, client: SpiceBasicInfo });
export const SpiceInitializedData = z.object({
  server: SpiceBasicInfo,
  client: SpiceBasicInfo.extend({ 'channel-type': z.number() }),
});

export const DeviceDeletedData = z.object({ device: z.string().optional(), path: z.string() });

/** An event as the runner passes it on (the QMP client's events, and the runner's own RUNNER_* ones). */
export interface VmEvent {
  event: string;
  data?: Record<string, unknown>;
}
