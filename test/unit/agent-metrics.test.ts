// The agent's metrics (src/agent/metrics.ts) on the in-memory datastore:
// datastore calls timed by operation and kind (transactions by the kinds they
// write), compare-and-swap conflicts on IPAM objects counted by the kind whose
// guard failed, CNI errors by code.
import { describe, expect, it } from 'vitest';
import { createAgentMetrics } from '../../src/agent/metrics.js';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { API_VERSION, type Resource } from '../../src/model/resources.js';

const handle = (name: string): Resource<'IPAMHandle'> => ({
  apiVersion: API_VERSION,
  kind: 'IPAMHandle',
  metadata: { name },
  spec: { handleID: name, block: {} },
});

describe('agent metrics', () => {
  it('times calls and transactions and counts IPAM conflicts by the failing op', async () => {
    const m = createAgentMetrics();
    const ds = m.wrapDatastore(new MemoryDatastore());
    const h = await ds.create(handle('h1'));
    await ds.txn([
      { op: 'update', res: h },
      {
        op: 'create',
        res: { apiVersion: API_VERSION, kind: 'IPPool', metadata: { name: 'p' }, spec: { cidr: '10.0.0.0/24' } },
      },
    ]);
    // The same resourceVersion again: the guard fails on the handle.
    await expect(
      ds.txn([
        { op: 'create', res: handle('h2') },
        { op: 'update', res: h },
      ]),
    ).rejects.toThrow();
    await expect(ds.update(h)).rejects.toThrow();
    const text = m.registry.render();
    expect(text).toContain(
      'netplugin_datastore_request_duration_seconds_count{operation="create",kind="IPAMHandle",result="ok"} 1',
    );
    expect(text).toContain(
      'netplugin_datastore_request_duration_seconds_count{operation="txn",kind="IPAMHandle+IPPool",result="ok"} 1',
    );
    expect(text).toContain(
      'netplugin_datastore_request_duration_seconds_count{operation="txn",kind="IPAMHandle",result="Conflict"} 1',
    );
    expect(text).toContain('netplugin_ipam_cas_retries_total{kind="IPAMHandle"} 2');
  });

  it('counts CNI requests by result and errors by code', () => {
    const m = createAgentMetrics();
    m.served({ plugin: 'netplugin', command: 'ADD', exitCode: 0, stdout: '{}', seconds: 0.002 });
    m.served({
      plugin: 'netplugin',
      command: 'ADD',
      exitCode: 1,
      stdout: '{"code":100,"msg":"pool exhausted"}',
      seconds: 0.003,
    });
    m.served({ plugin: 'netplugin', command: 'DEL', exitCode: 1, stdout: 'not json', seconds: 0.001 });
    const text = m.registry.render();
    expect(text).toContain('netplugin_cni_requests_total{plugin="netplugin",command="ADD",result="success"} 1');
    expect(text).toContain('netplugin_cni_errors_total{plugin="netplugin",command="ADD",code="100"} 1');
    expect(text).toContain('netplugin_cni_errors_total{plugin="netplugin",command="DEL",code="unknown"} 1');
    expect(text).toContain('netplugin_cni_request_duration_seconds_count{plugin="netplugin",command="ADD"} 2');
  });
});

describe('dataplane controller metrics', () => {
  it('times policy batches by mode and route reconciles, and counts route changes and errors', () => {
    const m = createAgentMetrics();
    m.policyApplied({ full: true, commands: 120, compileMs: 30, applyMs: 70 });
    m.policyApplied({ full: false, commands: 4, compileMs: 1, applyMs: 9 });
    m.routesApplied({ seconds: 0.004, routesAdded: 3, routesRemoved: 1, errors: 2 });
    const text = m.registry.render();
    expect(text).toContain('netplugin_policy_program_duration_seconds_count{mode="full"} 1');
    expect(text).toContain('netplugin_policy_program_duration_seconds_sum{mode="full"} 0.1');
    expect(text).toContain('netplugin_policy_program_duration_seconds_sum{mode="incremental"} 0.01');
    expect(text).toContain('netplugin_policy_nft_commands_total{mode="full"} 120');
    expect(text).toContain('netplugin_route_reconcile_duration_seconds_count 1');
    expect(text).toContain('netplugin_route_changes_total{change="added"} 3');
    expect(text).toContain('netplugin_route_changes_total{change="removed"} 1');
    expect(text).toContain('netplugin_route_errors_total 2');
  });

  it('counts refused floating IPs by kind', () => {
    const m = createAgentMetrics();
    m.floatingRefused('conflict');
    m.floatingRefused('conflict');
    m.floatingRefused('invalid');
    const text = m.registry.render();
    expect(text).toContain('netplugin_floating_ip_refused_total{kind="conflict"} 2');
    expect(text).toContain('netplugin_floating_ip_refused_total{kind="invalid"} 1');
  });
});
