// kubelet's device plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto), the part
// vmop's node agent uses, as protobuf.js JSON: no .proto file to ship beside the compiled code.
import { loadPackageDefinition, type GrpcObject, type ServiceClientConstructor } from '@grpc/grpc-js';
import { fromJSON } from '@grpc/proto-loader';

export const API_VERSION = 'v1beta1';
/** kubelet's own socket in its device-plugins directory, where plugins register. */
export const KUBELET_SOCKET = 'kubelet.sock';

const string = (id: number) => ({ type: 'string', id });
const strings = (id: number) => ({ rule: 'repeated', type: 'string', id });
const repeated = (type: string, id: number) => ({ rule: 'repeated', type, id });

const descriptor = {
  nested: {
    v1beta1: {
      nested: {
        Registration: { methods: { Register: { requestType: 'RegisterRequest', responseType: 'Empty' } } },
        DevicePlugin: {
          methods: {
            GetDevicePluginOptions: { requestType: 'Empty', responseType: 'DevicePluginOptions' },
            ListAndWatch: {
              requestType: 'Empty',
              responseType: 'ListAndWatchResponse',
              responseStream: true,
            },
            GetPreferredAllocation: {
              requestType: 'PreferredAllocationRequest',
              responseType: 'PreferredAllocationResponse',
            },
            Allocate: { requestType: 'AllocateRequest', responseType: 'AllocateResponse' },
            PreStartContainer: {
              requestType: 'PreStartContainerRequest',
              responseType: 'PreStartContainerResponse',
            },
          },
        },
        Empty: { fields: {} },
        DevicePluginOptions: {
          fields: {
            pre_start_required: { type: 'bool', id: 1 },
            get_preferred_allocation_available: { type: 'bool', id: 2 },
          },
        },
        RegisterRequest: {
          fields: {
            version: string(1),
            endpoint: string(2),
            resource_name: string(3),
            options: { type: 'DevicePluginOptions', id: 4 },
          },
        },
        ListAndWatchResponse: { fields: { devices: repeated('Device', 1) } },
        Device: { fields: { ID: string(1), health: string(2) } },
        PreStartContainerRequest: { fields: { devices_ids: strings(1) } },
        PreStartContainerResponse: { fields: {} },
        PreferredAllocationRequest: {
          fields: { container_requests: repeated('ContainerPreferredAllocationRequest', 1) },
        },
        ContainerPreferredAllocationRequest: {
          fields: {
            available_deviceIDs: strings(1),
            must_include_deviceIDs: strings(2),
            allocation_size: { type: 'int32', id: 3 },
          },
        },
        PreferredAllocationResponse: {
          fields: { container_responses: repeated('ContainerPreferredAllocationResponse', 1) },
        },
        ContainerPreferredAllocationResponse: { fields: { deviceIDs: strings(1) } },
        AllocateRequest: { fields: { container_requests: repeated('ContainerAllocateRequest', 1) } },
        ContainerAllocateRequest: { fields: { devices_ids: strings(1) } },
        AllocateResponse: { fields: { container_responses: repeated('ContainerAllocateResponse', 1) } },
        ContainerAllocateResponse: {
          fields: {
            envs: { keyType: 'string', type: 'string', id: 1 },
            mounts: repeated('Mount', 2),
            devices: repeated('DeviceSpec', 3),
            annotations: { keyType: 'string', type: 'string', id: 4 },
          },
        },
        Mount: {
          fields: { container_path: string(1), host_path: string(2), read_only: { type: 'bool', id: 3 } },
        },
        DeviceSpec: { fields: { container_path: string(1), host_path: string(2), permissions: string(3) } },
      },
    },
  },
};

const api = // (protobuf.js' JSON types ask for a comment on every method.)
  (
    loadPackageDefinition(
      fromJSON(descriptor as unknown as Parameters<typeof fromJSON>[0], {
        keepCase: true,
        defaults: true,
        arrays: true,
        objects: true,
      }),
    ) as {
      v1beta1: GrpcObject;
    }
  ).v1beta1;

export const Registration = api.Registration as ServiceClientConstructor;
export const DevicePlugin = api.DevicePlugin as ServiceClientConstructor;

export interface DeviceSpec {
  container_path: string;
  host_path: string;
  permissions: string;
}
export interface Device {
  ID: string;
  health: 'Healthy' | 'Unhealthy';
}
export interface AllocateRequest {
  container_requests: Array<{ devices_ids: string[] }>;
}
