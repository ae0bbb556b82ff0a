// A small CRI client: the runtime.v1 RuntimeService calls a kubelet makes to
// run a pod (Status, RunPodSandbox, PodSandboxStatus, CreateContainer, StartContainer,
// ExecSync, StopPodSandbox, RemovePodSandbox) over the runtime's unix socket.
// The messages are the subset in cri-api.proto; @grpc/grpc-js and
// @grpc/proto-loader come with etcd3 (no dependency of our own).
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { fileURLToPath } from 'node:url';

const PROTO = fileURLToPath(new URL('./cri-api.proto', import.meta.url));

export interface PodMeta {
  name: string;
  namespace: string;
  uid: string;
  attempt?: number;
}

export interface PortMapping {
  protocol?: 'TCP' | 'UDP' | 'SCTP';
  containerPort: number;
  hostPort: number;
  hostIp?: string;
}

/** What RunPodSandbox takes (and CreateContainer again, as the kubelet passes it). */
export interface SandboxConfig {
  metadata: PodMeta;
  hostname?: string;
  portMappings?: PortMapping[];
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  linux?: { cgroupParent?: string };
}

export interface SandboxStatus {
  id: string;
  metadata: PodMeta;
  state: 'SANDBOX_READY' | 'SANDBOX_NOTREADY';
  network?: { ip: string; additionalIps: Array<{ ip: string }> };
}

export interface ExecResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

/** A failed call: the gRPC status code and the runtime's message (what a kubelet logs in the pod's events). */
export class CriError extends Error {
  constructor(
    readonly method: string,
    readonly code: number,
    readonly details: string,
  ) {
    super(`CRI ${method}: ${grpc.status[code] ?? code}: ${details}`);
  }
}

type Unary = (req: unknown, meta: grpc.Metadata, opts: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r: unknown) => void) => void;

export class CriClient {
  private readonly client: grpc.Client & Record<string, Unary>;

  constructor(socket: string) {
    const def = protoLoader.loadSync(PROTO, { keepCase: false, longs: Number, enums: String, defaults: true });
    const pkg = grpc.loadPackageDefinition(def) as unknown as { runtime: { v1: { RuntimeService: grpc.ServiceClientConstructor } } };
    this.client = new pkg.runtime.v1.RuntimeService(`unix://${socket}`, grpc.credentials.createInsecure()) as never;
  }

  /** One unary call; timeoutMs bounds it (a kubelet's runtime-request-timeout is 2 minutes). */
  call<T>(method: string, req: object, timeoutMs = 120_000): Promise<T> {
    return new Promise((resolve, reject) => {
      const fn = this.client[method]!;
      fn.call(this.client, req, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (e, r) => {
        if (e) reject(new CriError(method, e.code, e.details));
        else resolve(r as T);
      });
    });
  }

  async version(): Promise<{ runtimeName: string; runtimeVersion: string; runtimeApiVersion: string }> {
    return this.call('Version', { version: 'v1' }, 5_000);
  }

  /** The runtime's conditions (RuntimeReady, NetworkReady) and, verbose, its info (containerd: the loaded CNI config). */
  async status(verbose = false): Promise<{ conditions: Array<{ type: string; status: boolean; reason: string; message: string }>; info: Record<string, string> }> {
    const r = await this.call<{ status: { conditions: Array<{ type: string; status: boolean; reason: string; message: string }> }; info: Record<string, string> }>('Status', { verbose }, 5_000);
    return { conditions: r.status.conditions, info: r.info };
  }

  async runPodSandbox(config: SandboxConfig): Promise<string> {
    return (await this.call<{ podSandboxId: string }>('RunPodSandbox', { config })).podSandboxId;
  }

  async podSandboxStatus(id: string): Promise<SandboxStatus> {
    return (await this.call<{ status: SandboxStatus }>('PodSandboxStatus', { podSandboxId: id })).status;
  }

  async listPodSandbox(): Promise<Array<{ id: string; metadata: PodMeta; state: string }>> {
    return (await this.call<{ items: Array<{ id: string; metadata: PodMeta; state: string }> }>('ListPodSandbox', {})).items;
  }

  async stopPodSandbox(id: string): Promise<void> {
    await this.call('StopPodSandbox', { podSandboxId: id });
  }

  async removePodSandbox(id: string): Promise<void> {
    await this.call('RemovePodSandbox', { podSandboxId: id });
  }

  /** CreateContainer + StartContainer of `image` running `command` in the sandbox. */
  async startContainer(sandboxId: string, sandbox: SandboxConfig, name: string, image: string, command: string[]): Promise<string> {
    const config = { metadata: { name }, image: { image }, command };
    const { containerId } = await this.call<{ containerId: string }>('CreateContainer', { podSandboxId: sandboxId, config, sandboxConfig: sandbox });
    await this.call('StartContainer', { containerId });
    return containerId;
  }

  async execSync(containerId: string, cmd: string[], timeoutSeconds = 20): Promise<ExecResult> {
    const r = await this.call<{ stdout: Buffer; stderr: Buffer; exitCode: number }>('ExecSync', { containerId, cmd, timeout: timeoutSeconds }, (timeoutSeconds + 10) * 1000);
    return { stdout: r.stdout.toString(), stderr: r.stderr.toString(), exitCode: r.exitCode };
  }

  close(): void {
    this.client.close();
  }
}
