// Which API server connections go through HTTPS_PROXY / HTTP_PROXY: Go's
// httpproxy rules for NO_PROXY, as kubectl applies them.
import { describe, expect, it } from 'vitest';
import { parseProxyUrl, proxyFromEnv } from '../../src/k8s/proxy.js';

const P = 'http://proxy:3128';
const via = (server: string, env: Record<string, string>) => proxyFromEnv(new URL(server), env);

describe('proxyFromEnv', () => {
  it('uses HTTPS_PROXY for https and HTTP_PROXY for http, lower case first', () => {
    expect(via('https://api.example.com:6443', { HTTPS_PROXY: P })).toBe(P);
    expect(via('https://api.example.com:6443', { HTTP_PROXY: P })).toBeUndefined();
    expect(via('http://api.example.com:8080', { HTTP_PROXY: P })).toBe(P);
    expect(via('https://api.example.com', { HTTPS_PROXY: 'http://upper:1', https_proxy: 'http://lower:1' })).toBe(
      'http://lower:1',
    );
  });
  it('never proxies loopback or localhost', () => {
    for (const s of ['https://127.0.0.1:6443', 'https://localhost:6443', 'https://[::1]:6443'])
      expect(via(s, { HTTPS_PROXY: P })).toBeUndefined();
  });
  it('honours NO_PROXY: *, domains and subdomains, leading dots, IPs, CIDRs, ports', () => {
    const s = 'https://api.k8s.example.com:6443';
    expect(via(s, { HTTPS_PROXY: P, NO_PROXY: '*' })).toBeUndefined();
    expect(via(s, { HTTPS_PROXY: P, NO_PROXY: 'example.com' })).toBeUndefined();
    expect(via(s, { HTTPS_PROXY: P, no_proxy: '.k8s.example.com' })).toBeUndefined();
    expect(via(s, { HTTPS_PROXY: P, NO_PROXY: 'api.k8s.example.com:6443' })).toBeUndefined();
    expect(via(s, { HTTPS_PROXY: P, NO_PROXY: 'api.k8s.example.com:443' })).toBe(P);
    expect(via(s, { HTTPS_PROXY: P, NO_PROXY: 'ample.com, other.org' })).toBe(P);
    expect(via('https://10.96.0.1:443', { HTTPS_PROXY: P, NO_PROXY: '10.96.0.0/12' })).toBeUndefined();
    expect(via('https://10.200.0.1:443', { HTTPS_PROXY: P, NO_PROXY: '10.96.0.0/12' })).toBe(P);
    expect(via('https://[fd00::1]:443', { HTTPS_PROXY: P, NO_PROXY: 'fd00::/8' })).toBeUndefined();
  });
  it('accepts host:port proxies and refuses schemes other than http', () => {
    expect(parseProxyUrl('proxy:3128', 'HTTPS_PROXY').host).toBe('proxy:3128');
    expect(() => parseProxyUrl('socks5://proxy:1080', 'HTTPS_PROXY')).toThrow(/only http:\/\/ proxies/);
  });
});
