import { describe, expect, it } from 'vitest';
import { cleanEnv } from '../../src/cni/exec.js';

describe('cleanEnv', () => {
  it('drops NODE_EXTRA_CA_CERTS and undefined values, keeps the CNI variables', () => {
    const env = {
      CNI_COMMAND: 'ADD',
      CNI_PATH: '/opt/cni/bin',
      NODE_EXTRA_CA_CERTS: '/etc/ssl/extra.pem',
      UNSET: undefined,
      PATH: '/usr/bin',
    };
    expect(cleanEnv(env)).toEqual({ CNI_COMMAND: 'ADD', CNI_PATH: '/opt/cni/bin', PATH: '/usr/bin' });
    expect(env.NODE_EXTRA_CA_CERTS).toBe('/etc/ssl/extra.pem');
  });
});
