// Placeholder until the selector language lands (issue 5): owned by the IPAM work.
export interface Selector {
  matches(labels: Record<string, string>): boolean;
  toString(): string;
}
export function parseSelector(expr: string): Selector {
  if (expr.trim() === 'all()' || expr.trim() === '') return { matches: () => true, toString: () => 'all()' };
  throw new Error(`selector not implemented yet: ${expr}`);
}
