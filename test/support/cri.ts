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

type Callback = (e: grpc.ServiceError | null, r: unknown) => void;
type Unary = (req: unknown, meta: grpc.Metadata, opts: grpc.CallOptions, cb: Callback) => void;

export interface RuntimeCondition {
  type: string;
  status: boolean;
  reason: string;
  message: string;
}

interface PodSandbox {
  id: string;
  metadata: PodMeta;
  state: string;
}

export class CriClient {
  private readonly client: grpc.Client & Record<string, Unary>;

  constructor(socket: string) {
    const def = protoLoader.loadSync(PROTO, { keepCase: false, longs: Number, enums: String, defaults: true });
    type Pkg = { runtime: { v1: { RuntimeService: grpc.ServiceClientConstructor } } };
    const pkg = grpc.loadPackageDefinition(def) as unknown as Pkg;
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

  /** The runtime's conditions (RuntimeReady, NetworkReady); verbose, its info too (containerd: the CNI config). */
  async status(verbose = false): Promise<{ conditions: RuntimeCondition[]; info: Record<string, string> }> {
    type Reply = { status: { conditions: RuntimeCondition[] }; info: Record<string, string> };
    const r = await this.call<Reply>('Status', { verbose }, 5_000);
    return { conditions: r.status.conditions, info: r.info };
  }

  async runPodSandbox(config: SandboxConfig): Promise<string> {
    return (await this.call<{ podSandboxId: string }>('RunPodSandbox', { config })).podSandboxId;
  }

  async podSandboxStatus(id: string): Promise<SandboxStatus> {
    return (await this.call<{ status: SandboxStatus }>('PodSandboxStatus', { podSandboxId: id })).status;
  }

  async listPodSandbox(): Promise<PodSandbox[]> {
    return (await this.call<{ items: PodSandbox[] }>('ListPodSandbox', {})).items;
  }

  async stopPodSandbox(id: string): Promise<void> {
    await this.call('StopPodSandbox', { podSandboxId: id });
  }

  async removePodSandbox(id: string): Promise<void> {
    await this.call('RemovePodSandbox', { podSandboxId: id });
  }

  /** CreateContainer + StartContainer of `image` running `command` in the sandbox. */
  async startContainer(sandboxId: string, sandbox: SandboxConfig, name: string, image: string, command: string[]) {
    const config = { metadata: { name }, image: { image }, command };
    const req = { podSandboxId: sandboxId, config, sandboxConfig: sandbox };
    const { containerId } = await this.call<{ containerId: string }>('CreateContainer', req);
    await this.call('StartContainer', { containerId });
    return containerId;
  }

  async execSync(containerId: string, cmd: string[], timeoutSeconds = 20): Promise<ExecResult> {
    type Reply = { stdout: Buffer; stderr: Buffer; exitCode: number };
    const req = { containerId, cmd, timeout: timeoutSeconds };
    const r = await this.call<Reply>('ExecSync', req, (timeoutSeconds + 10) * 1000);
    return { stdout: r.stdout.toString(), stderr: r.stderr.toString(), exitCode: r.exitCode };
  }

  close(): void {
    this.client.close();
  }
}
