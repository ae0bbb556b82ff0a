// The KubeControllersConfiguration resource `default`: the settings the
// controllers honour, with their defaults. Durations use Go's notation
// (`15m`, `1m30s`, `0s`), as the resource's users know it from Calico.
import { API_VERSION, type KubeControllersConfigurationSpec, type Resource } from './resources.js';

export const CONFIG_NAME = 'default';
export const CONTROLLER_NAMES = ['policy', 'profile', 'workloadendpoint', 'node'] as const;
export type ControllerName = (typeof CONTROLLER_NAMES)[number];

export interface Settings {
  /** How long an allocation must look leaked before GC releases it. */
  leakGracePeriodMs: number;
  /** How often GC scans. */
  reconcilerPeriodMs: number;
  autoHostEndpoints: boolean;
}

export const DEFAULT_SETTINGS: Settings = {
  leakGracePeriodMs: 15 * 60_000,
  reconcilerPeriodMs: 60_000,
  autoHostEndpoints: false,
};

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** `1h2m3.5s`, `500ms`, `0s`, `0` -> milliseconds; undefined when malformed. */
export function parseDuration(s: string): number | undefined {
  const t = s.trim();
  if (t === '0') return 0;
  if (!/^(\d+(\.\d+)?(ms|s|m|h))+$/.test(t)) return undefined;
  let ms = 0;
  for (const m of t.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)) ms += Number(m[1]) * UNITS[m[2]!]!;
  return Math.round(ms);
}

export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  const parts: string[] = [];
  let rest = ms;
  for (const [u, n] of [
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (rest >= n) {
      parts.push(`${Math.floor(rest / n)}${u}`);
      rest %= n;
    }
  }
  if (rest) parts.push(`${rest}ms`);
  return parts.join('');
}

/** The resource created when `default` is missing. */
export function defaultConfiguration(): Resource<'KubeControllersConfiguration'> {
  return {
    apiVersion: API_VERSION,
    kind: 'KubeControllersConfiguration',
    metadata: { name: CONFIG_NAME },
    spec: {
      controllers: {
        node: {
          leakGracePeriod: formatDuration(DEFAULT_SETTINGS.leakGracePeriodMs),
          reconcilerPeriod: formatDuration(DEFAULT_SETTINGS.reconcilerPeriodMs),
          hostEndpoint: { autoCreate: 'Disabled' },
        },
      },
    },
  };
}

/**
 * Settings from the resource; a malformed field keeps its default and is
 * reported in `problems` (naming the field, the value and the form expected).
 */
export function settingsFrom(spec: KubeControllersConfigurationSpec | undefined): {
  settings: Settings;
  problems: string[];
} {
  const problems: string[] = [];
  const node = (spec?.controllers?.node ?? {}) as {
    leakGracePeriod?: unknown;
    reconcilerPeriod?: unknown;
    hostEndpoint?: { autoCreate?: unknown };
  };
  const dur = (field: string, v: unknown, dflt: number, min: number) => {
    if (v === undefined || v === null || v === '') return dflt;
    const ms = typeof v === 'string' ? parseDuration(v) : undefined;
    if (ms === undefined || ms < min) {
      problems.push(
        `KubeControllersConfiguration default: spec.controllers.node.${field}=${JSON.stringify(v)} is not a ` +
          `duration${min ? ` of at least ${formatDuration(min)}` : ''} such as "15m" or "30s"; using ` +
          `${formatDuration(dflt)}`,
      );
      return dflt;
    }
    return ms;
  };
  const auto = node.hostEndpoint?.autoCreate;
  if (auto !== undefined && auto !== 'Enabled' && auto !== 'Disabled') {
    problems.push(
      `KubeControllersConfiguration default: spec.controllers.node.hostEndpoint.autoCreate=${JSON.stringify(auto)} ` +
        `must be "Enabled" or "Disabled"; using Disabled`,
    );
  }
  return {
    settings: {
      leakGracePeriodMs: dur('leakGracePeriod', node.leakGracePeriod, DEFAULT_SETTINGS.leakGracePeriodMs, 0),
      reconcilerPeriodMs: dur('reconcilerPeriod', node.reconcilerPeriod, DEFAULT_SETTINGS.reconcilerPeriodMs, 1000),
      autoHostEndpoints: auto === 'Enabled',
    },
    problems,
  };
}
