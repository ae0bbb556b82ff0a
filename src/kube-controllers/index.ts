// netplugin-kube-controllers: the cluster-wide controllers (docs/kube-controllers.md). One process per replica;
// replicas campaign for a Lease and only the leader runs the controllers, so
// a standby never writes. Settings come from KubeControllersConfiguration
// `default` (created with defaults by the leader when missing) and apply
// without a restart.
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { DatastoreError } from '../errors.js';
import type { Logger } from '../log/types.js';
import type { KubeClient } from '../k8s/client.js';
import type { Resource } from '../model/resources.js';
import type { Datastore } from '../datastore/types.js';
import type { Registry } from '../observe/metrics.js';
import { Informer } from '../watch/informer.js';
import { datastoreSource } from '../datastore/list-watch.js';
import { LeaderElector } from './leader.js';
import {
  CONFIG_NAME,
  DEFAULT_SETTINGS,
  defaultConfiguration,
  settingsFrom,
  type ControllerName,
  type Settings,
} from '../model/kube-controllers-config.js';
import type { Controller, ControllerContext } from './framework.js';
import { describeError } from './framework.js';
import { policyController } from './policy.js';
import { profileController } from './profile.js';
import { workloadEndpointController } from './workloadendpoint.js';
import { nodeController } from './node.js';

const LEASE_NAME = 'netplugin-kube-controllers';

interface KubeControllersOptions {
  ds: Datastore;
  kube: KubeClient;
  log: Logger;
  registry: Registry;
  controllers: ControllerName[];
  /** Namespace of the Lease (the process's own namespace). */
  namespace: string;
  identity?: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  /** Called when this replica lost the lease: the caller exits (a restart starts clean). */
  onLostLeadership: () => void;
}

interface KubeControllers {
  readonly identity: string;
  isLeader(): boolean;
  /** Liveness: the leader's watches are open (or it is a standby). */
  healthy(): { ok: boolean; detail: Record<string, unknown> };
  /** Readiness: a standby, or a leader whose controllers finished their start-up resync. */
  ready(): { ok: boolean; detail: Record<string, unknown> };
  stop(): Promise<void>;
}

/** Watches KubeControllersConfiguration `default`; the leader creates it when missing. */
class SettingsWatcher {
  private current: Settings = DEFAULT_SETTINGS;
  private lastText = '';
  private readonly listeners: Array<() => void> = [];
  readonly informer: Informer<Resource<'KubeControllersConfiguration'>>;

  constructor(
    private readonly ds: Datastore,
    private readonly log: Logger,
  ) {
    this.informer = new Informer(
      datastoreSource(ds, 'KubeControllersConfiguration'),
      {
        onChange: (key, obj) => {
          if (key === CONFIG_NAME) this.apply(obj);
        },
      },
      {
        onError: (e) =>
          log.warn('kube-controllers: watch of KubeControllersConfiguration broke; re-listing', { error: e.message }),
      },
    );
  }

  private apply(obj: Resource<'KubeControllersConfiguration'> | undefined): void {
    const { settings, problems } = settingsFrom(obj?.spec);
    for (const p of problems) this.log.error(p);
    const text = JSON.stringify(settings);
    if (text === this.lastText) return;
    const first = this.lastText === '';
    this.lastText = text;
    this.current = settings;
    this.log.info(first ? 'kube-controllers: settings' : 'kube-controllers: settings changed; applying', {
      ...settings,
    });
    if (!first) for (const l of this.listeners) l();
  }

  get settings(): Settings {
    return this.current;
  }

  onChange(fn: () => void): void {
    this.listeners.push(fn);
  }

  /** Leader only: create `default` with the defaults when it does not exist. */
  async ensureExists(): Promise<void> {
    try {
      await this.ds.get('KubeControllersConfiguration', CONFIG_NAME);
    } catch (e) {
      if (!DatastoreError.is(e, 'NotFound')) throw e;
      try {
        await this.ds.create(defaultConfiguration());
        this.log.info('kube-controllers: created KubeControllersConfiguration default with the default settings');
      } catch (e2) {
        if (!DatastoreError.is(e2, 'AlreadyExists')) throw e2;
      }
    }
  }
}

export function startKubeControllers(o: KubeControllersOptions): KubeControllers {
  const identity = o.identity ?? `${hostname()}_${randomBytes(4).toString('hex')}`;
  const settings = new SettingsWatcher(o.ds, o.log);
  const ctx: ControllerContext = {
    ds: o.ds,
    kube: o.kube,
    log: o.log,
    registry: o.registry,
    settings: () => settings.settings,
    onSettings: (fn) => settings.onChange(fn),
  };
  const controllers: Controller[] = [];
  let leading = false;
  let stopped = false;
  let notWatchingSince: number | undefined;
  const leaderGauge = o.registry.gauge(
    'netplugin_kube_controllers_leader',
    '1 while this replica holds the lease and runs the controllers',
  );
  o.registry.onCollect(() => leaderGauge.set(undefined, leading ? 1 : 0));

  const startLeading = () => {
    if (stopped) return;
    leading = true;
    void (async () => {
      // The settings first, so GC never runs with a default that `default` overrides.
      for (let delay = 500; !stopped && leading; delay = Math.min(delay * 2, 10_000)) {
        try {
          await settings.ensureExists();
          break;
        } catch (e) {
          o.log.warn('kube-controllers: cannot read or create KubeControllersConfiguration default; retrying', {
            error: describeError(e),
          });
          await new Promise((r) => setTimeout(r, delay));
        }
      }
      settings.informer.start();
      await settings.informer.whenSynced();
      if (stopped || !leading) return;
      const make: Record<ControllerName, () => Controller> = {
        policy: () => policyController(ctx),
        profile: () => profileController(ctx),
        workloadendpoint: () => workloadEndpointController(ctx),
        node: () => nodeController(ctx),
      };
      for (const n of o.controllers) {
        // With the kubernetes datastore these kinds are derived on read: nothing to mirror.
        if (o.ds.type === 'kubernetes' && n !== 'node') {
          o.log.info(
            `kube-controllers: ${n} controller not needed with the kubernetes datastore (its objects are derived on ` +
              `read)`,
          );
          continue;
        }
        const c = make[n]();
        controllers.push(c);
        c.start();
        o.log.info(`kube-controllers: started the ${n} controller`);
      }
    })();
  };

  const elector = new LeaderElector({
    client: o.kube,
    namespace: o.namespace,
    name: LEASE_NAME,
    identity,
    log: o.log,
    ...(o.leaseDurationMs ? { leaseDurationMs: o.leaseDurationMs } : {}),
    ...(o.renewDeadlineMs ? { renewDeadlineMs: o.renewDeadlineMs } : {}),
    ...(o.retryPeriodMs ? { retryPeriodMs: o.retryPeriodMs } : {}),
    onStartedLeading: startLeading,
    onStoppedLeading: () => {
      leading = false;
      // Stop writing now; the caller exits so a restart campaigns afresh.
      void Promise.all(controllers.map((c) => c.stop())).finally(() => o.onLostLeadership());
    },
  });
  elector.start();

  return {
    identity,
    isLeader: () => leading,
    healthy() {
      const watching = controllers.every((c) => !c.synced || c.watching);
      if (watching) notWatchingSince = undefined;
      else notWatchingSince ??= Date.now();
      // A watch re-lists with backoff after a break; only a long outage is unhealthy.
      const ok = notWatchingSince === undefined || Date.now() - notWatchingSince < 120_000;
      return {
        ok,
        detail: { leader: leading, watches: Object.fromEntries(controllers.map((c) => [c.name, c.watching])) },
      };
    },
    ready() {
      if (!leading) return { ok: true, detail: { role: 'standby', holder: elector.holder ?? null } };
      const synced = Object.fromEntries(controllers.map((c) => [c.name, c.synced]));
      const ok = controllers.length > 0 ? controllers.every((c) => c.synced) : settings.informer.synced;
      return { ok, detail: { role: 'leader', synced } };
    },
    async stop() {
      stopped = true;
      settings.informer.stop();
      await Promise.all(controllers.map((c) => c.stop()));
      await elector.stop();
      leading = false;
    },
  };
}
