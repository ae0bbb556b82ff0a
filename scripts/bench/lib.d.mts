// Types of lib.mjs for the TypeScript bench bodies (scripts/bench/*.ts).
export const CLK_TCK: number;
export function childrenCpuMs(): number;
export function processCpuMs(pid: number | string): number;
export function memoryMiB(pid: number | string): { hwm: number; rss: number };
export interface CniRun { ms: number; code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }
export function execCni(bin: string, env: Record<string, string | undefined>, stdin: string): Promise<CniRun>;
export function mapLimit<T, R>(items: T[], limit: number, fn: (item: T, i: number) => Promise<R>): Promise<R[]>;
export function quantile(xs: number[], p: number): number;
export function summary(xs: number[]): { p50: number; p90: number; p99: number; mean: number; n: number };
export function waitSocket(path: string, ms: number, failed: () => string | undefined): Promise<void>;
export function etcdWriteCounters(endpoint: string): Promise<Record<string, number>>;
