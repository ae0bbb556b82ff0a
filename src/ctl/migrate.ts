import { CtlError, type CtlIO, type CtlSession } from './io.js';
export async function cmdMigrate(rest: string[], _io: CtlIO, _s: CtlSession): Promise<number> {
  throw new CtlError(`unknown datastore migrate command ${JSON.stringify(rest[0])}`);
}
