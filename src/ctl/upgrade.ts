import { CtlError, type CtlIO, type CtlSession } from './io.js';
export async function cmdUpgrade(rest: string[], _io: CtlIO, _s: CtlSession): Promise<number> {
  throw new CtlError(`unknown upgrade command ${JSON.stringify(rest[0])}`);
}
