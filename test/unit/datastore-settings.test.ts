import { describe, expect, expectTypeOf, it } from 'vitest';
import { parseNetconf, type Netconf, type NetpluginIpam } from '../../src/config/netconf.js';
import {
  datastoreConfigFromEnv,
  datastoreSettingsOf,
  ETCD_SETTINGS_WITH_DEPRECATED,
  type DatastoreConfig,
  type DatastoreSettings,
} from '../../src/datastore/settings.js';

const BASE = { cniVersion: '1.0.0', name: 'k8s-pod-network', type: 'netplugin', ipam: { type: 'netplugin-ipam' } };

/** The datastore fields of a parsed netconf, as the schema outputs them. */
function schemaSettings(conf: Netconf): DatastoreSettings {
  const out: Record<string, unknown> = {};
  for (const k of [...ETCD_SETTINGS_WITH_DEPRECATED, 'kubernetes'] as const)
    if (conf[k] !== undefined) out[k] = conf[k];
  return out;
}

describe('datastore settings: one declaration', () => {
  it('the netconf schema and the raw netconf reader (netpluginctl --config) agree on every field', () => {
    const raw = {
      ...BASE,
      etcd_endpoints: 'https://10.0.0.1:2379,https://10.0.0.2:2379',
      etcd_key_file: '/etc/netplugin/key.pem',
      etcd_cert_file: '/etc/netplugin/cert.pem',
      etcd_ca_cert_file: '/etc/netplugin/ca.pem',
      etcd_authority: '10.0.0.3:2379',
      etcd_scheme: 'https',
      kubernetes: { kubeconfig: '/etc/cni/net.d/netplugin-kubeconfig', k8s_api_root: 'https://10.96.0.1:443' },
    };
    const conf = parseNetconf(raw, { pluginType: 'netplugin' });
    const { datastore_type, ...read } = datastoreSettingsOf(raw);
    expect(datastore_type).toBeUndefined();
    expect(read).toEqual(schemaSettings(conf));
    // Every field given was carried, not just some (etcd_discovery_srv excludes etcd_endpoints).
    expect(Object.keys(read).sort()).toEqual(
      [...ETCD_SETTINGS_WITH_DEPRECATED.filter((k) => k !== 'etcd_discovery_srv'), 'kubernetes'].sort(),
    );
    expect(conf.datastore_type).toBe('etcdv3');
  });

  it('the raw reader keeps only string etcd fields, treats a null datastore_type as absent and ignores other keys', () => {
    expect(
      datastoreSettingsOf({
        datastore_type: null,
        etcd_endpoints: 42,
        etcd_key_file: '/k',
        mtu: 1400,
        kubernetes: { kubeconfig: '', k8s_api_root: 'https://a' },
      }),
    ).toEqual({
      etcd_key_file: '/k',
      kubernetes: { k8s_api_root: 'https://a' },
    });
    expect(datastoreSettingsOf({ datastore_type: 'kubernetes' })).toEqual({ datastore_type: 'kubernetes' });
  });

  it('the environment names the etcd fields in upper case and has no variable for the deprecated ones', () => {
    expect(
      datastoreConfigFromEnv({
        ETCD_ENDPOINTS: 'https://a:2379',
        ETCD_DISCOVERY_SRV: 'example.com',
        ETCD_KEY_FILE: '/k',
        ETCD_CERT_FILE: '/c',
        ETCD_CA_CERT_FILE: '/ca',
        ETCD_AUTHORITY: 'b:2379',
        ETCD_SCHEME: 'https',
      }),
    ).toEqual({
      etcd_endpoints: 'https://a:2379',
      etcd_discovery_srv: 'example.com',
      etcd_key_file: '/k',
      etcd_cert_file: '/c',
      etcd_ca_cert_file: '/ca',
    });
  });

  it('types: a parsed netconf opens a datastore as it is, and Netconf is what the schema outputs (checked by tsc)', () => {
    const conf = parseNetconf(
      { ...BASE, datastore_type: 'kubernetes', ipam: { type: 'netplugin-ipam', assign_ipv6: 'True' } },
      { pluginType: 'netplugin' },
    );
    const ds: DatastoreConfig = conf;
    expect(ds.datastore_type).toBe('kubernetes');
    expect((conf.ipam as NetpluginIpam).assign_ipv6).toBe('true');
    expectTypeOf(conf).toMatchTypeOf<DatastoreSettings>();
    expectTypeOf<Netconf['datastore_type']>().toEqualTypeOf<'etcdv3' | 'kubernetes'>();
    expectTypeOf<Netconf['log_level']>().toEqualTypeOf<'ERROR' | 'WARNING' | 'INFO' | 'DEBUG'>();
    expectTypeOf<NetpluginIpam['assign_ipv4']>().toEqualTypeOf<'true' | 'false'>();
    expectTypeOf<Netconf['etcdEndpointList']>().toEqualTypeOf<string[]>();
  });
});
