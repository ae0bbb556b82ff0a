// The flow UI in a real browser: Debian's Chromium, headless, driven by
// playwright-core (which downloads no browser of its own). Records reach the
// built aggregator through the collector protocol with mTLS, as an agent's do.
// NETPLUGIN_UPDATE_SCREENSHOTS=1 writes the screenshots docs/flows.md shows.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import {
  agentClient,
  deniedRecord,
  flowsPki,
  record,
  startFlows,
  type FlowsPki,
  type FlowsProcess,
} from '../support/flows.js';
import type { FlowClient } from '../../src/flows/client.js';

const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
const SHOTS =
  process.env.NETPLUGIN_UPDATE_SCREENSHOTS === '1' ? resolve(import.meta.dirname, '../../docs/images') : undefined;

let pki: FlowsPki;
let agg: FlowsProcess;
let client: FlowClient;
let profile: string;
let browser: BrowserContext;
let page: Page;

const now = () => Math.floor(Date.now() / 1000);
const wep = (namespace: string, name: string, app: string) => ({
  type: 'wep' as const,
  namespace,
  name,
  labels: { app },
});

beforeAll(async () => {
  pki = flowsPki();
  agg = await startFlows(pki);
  client = agentClient(pki, agg.collectorPort);
  const t = now() - 20;
  client.push([
    record(t, {
      source: wep('frontend', 'web-7d9f', 'web'),
      dest: wep('backend', 'api-5c8b', 'api'),
      destPort: 8080,
      policies: {
        enforced: [
          {
            kind: 'NetworkPolicy',
            namespace: 'backend',
            name: 'allow-web',
            tier: 'default',
            action: 'Allow',
            ruleIndex: 0,
          },
        ],
        pending: [],
      },
    }),
    record(t, {
      reporter: 'Src',
      source: wep('frontend', 'web-7d9f', 'web'),
      dest: wep('backend', 'api-5c8b', 'api'),
      destPort: 8080,
      policies: {
        enforced: [{ kind: 'Profile', namespace: '', name: 'kns.frontend', tier: '', action: 'Allow', ruleIndex: 0 }],
        pending: [],
      },
    }),
    deniedRecord(t, {
      source: wep('tools', 'scanner-x1', 'scanner'),
      dest: wep('backend', 'api-5c8b', 'api'),
      destPort: 8080,
    }),
    record(t, {
      source: wep('backend', 'api-5c8b', 'api'),
      dest: { type: 'net', namespace: '', name: 'pub', labels: {} },
      destPort: 443,
      reporter: 'Src',
      policies: {
        enforced: [
          {
            kind: 'GlobalNetworkPolicy',
            namespace: '',
            name: 'egress-internet',
            tier: 'security',
            action: 'Allow',
            ruleIndex: 2,
          },
        ],
        pending: [],
      },
    }),
  ]);
  expect(await client.drained()).toBe(true);
  profile = mkdtempSync(join(tmpdir(), 'netplugin-chromium-'));
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: CHROMIUM_FLAGS,
    viewport: { width: 1600, height: 760 },
  });
  page = browser.pages()[0] ?? (await browser.newPage());
});

afterAll(async () => {
  await browser?.close();
  await client?.close();
  await agg?.stop();
  pki?.remove();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

describe('flow UI in Chromium', () => {
  it('shows the flows, streams new ones live, filters, opens a trace and draws the graph', async () => {
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(agg.apiUrl);
    const rows = page.locator('#flows tbody tr');
    await expect.poll(() => rows.count(), { timeout: 15_000 }).toBe(4);
    expect(await rows.allInnerTexts()).toEqual(
      expect.arrayContaining([
        expect.stringMatching(
          /Deny\s+tools\/scanner-x1\s+backend\/api-5c8b\s+TCP\s+8080\s+Dst\s+EndOfTier default default Deny \+1 pending/,
        ),
      ]),
    );
    // Hints fill the filters' suggestions.
    await expect
      .poll(() =>
        page
          .locator('#hint-sourceNamespace option')
          .evaluateAll((os) => os.map((o) => (o as unknown as { value: string }).value)),
      )
      .toEqual(['backend', 'frontend', 'tools']);

    // Live mode: a flow the agent reports now appears without a reload.
    await page.locator('#live').check();
    await expect.poll(() => page.locator('#status').innerText()).toBe('live');
    // The agent reports each second until the row shows (a report before the page's watch is open
    // is not streamed to it; each later one updates the flow, which is).
    const ledger = () =>
      record(now(), {
        source: wep('frontend', 'web-7d9f', 'web'),
        dest: wep('payments', 'ledger-0', 'ledger'),
        destPort: 5432,
        policies: {
          enforced: [
            {
              kind: 'KubernetesNetworkPolicy',
              namespace: 'payments',
              name: 'ledger-ingress',
              tier: '',
              action: 'Allow',
              ruleIndex: 1,
            },
          ],
          pending: [],
        },
      });
    await expect
      .poll(
        async () => {
          const top = await rows.first().innerText();
          if (!/payments\/ledger-0/.test(top)) client.push([ledger()]);
          return top;
        },
        { timeout: 20_000, interval: 1000 },
      )
      .toMatch(/payments\/ledger-0/);
    await page.locator('#live').uncheck();

    // Filter: denied only.
    await page.locator('select[name=action]').selectOption('Deny');
    await page.locator('#filters button[type=submit]').click();
    await expect.poll(() => rows.count()).toBe(1);
    expect(await rows.first().getAttribute('data-action')).toBe('Deny');

    // The trace of a row: enforced and pending.
    await rows.first().click();
    await expect.poll(() => page.locator('#details').isVisible()).toBe(true);
    expect(await page.locator('#trace-enforced tbody tr').allInnerTexts()).toEqual([
      expect.stringMatching(/1\s+EndOfTier\s+default\s+—\s+default\s+—\s+Deny/),
    ]);
    expect(await page.locator('#trace-pending tbody tr').allInnerTexts()).toEqual([
      expect.stringMatching(/1\s+StagedNetworkPolicy\s+default\s+ns-b\s+staged-allow-c\s+1\s+Allow/),
    ]);
    expect(await page.locator('#flow-summary').innerText()).toMatch(/tools\/scanner-x1 \[wep\]/);

    // Every flow again, a trace open: the screenshot of the table.
    await page.locator('select[name=action]').selectOption('');
    await page.locator('#filters button[type=submit]').click();
    // Five or six: the live reports may fall in two buckets of the ledger flow.
    await expect.poll(() => rows.count()).toBeGreaterThanOrEqual(5);
    await rows.filter({ hasText: 'scanner-x1' }).click();
    const tableShot = join(SHOTS ?? profile, 'flows-ui.png');
    await page.screenshot({ path: tableShot });
    expect(statSync(tableShot).size).toBeGreaterThan(10_000);

    // The graph: workloads by namespace, edges coloured by verdict.
    await page.locator('#close-details').click();
    await page.locator('#tab-graph').click();
    await expect.poll(() => page.locator('#graph .edge').count()).toBe(4);
    expect(await page.locator('#graph .edge.Deny').count()).toBe(1);
    expect(await page.locator('#graph .edge.Allow').count()).toBe(3);
    expect(await page.locator('#graph .ns-label').allTextContents()).toEqual([
      '(networks)',
      'backend',
      'frontend',
      'payments',
      'tools',
    ]);
    const stroke = await page
      .locator('#graph .edge.Deny')
      .evaluate(
        (e) =>
          (globalThis as unknown as { getComputedStyle(e: unknown): { stroke: string } }).getComputedStyle(e).stroke,
      );
    expect(stroke).toBe('rgb(207, 34, 46)');
    const graphShot = join(SHOTS ?? profile, 'flows-graph.png');
    await page.screenshot({ path: graphShot });
    expect(statSync(graphShot).size).toBeGreaterThan(10_000);
    expect(errors).toEqual([]);
  });
});
