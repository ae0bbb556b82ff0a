// One policy rule that took part in a connection's verdict, as flow records carry it (the
// enforced trace from the kernel's tags, the pending trace from the staged policies' evaluation)
// and as the aggregator serves it. Here, below both the agent and the aggregator, so the pure
// evaluation of staged policies (./staged.ts) speaks the same type.

/** The policy kinds a hit names: enforced kinds, their staged forms, Profile, and the default deny after a tier. */
export const HIT_KINDS = [
  'NetworkPolicy',
  'GlobalNetworkPolicy',
  'KubernetesNetworkPolicy',
  'StagedNetworkPolicy',
  'StagedGlobalNetworkPolicy',
  'StagedKubernetesNetworkPolicy',
  'Profile',
  'EndOfTier',
] as const;
type HitKind = (typeof HIT_KINDS)[number];

export const HIT_ACTIONS = ['Allow', 'Deny', 'Pass'] as const;
export type HitAction = (typeof HIT_ACTIONS)[number];

/** One policy rule that took part in the verdict. */
export interface PolicyHit {
  kind: HitKind;
  /** '' for global kinds and EndOfTier. */
  namespace: string;
  name: string;
  /** '' when the kind has no tier (Kubernetes policies, profiles). */
  tier: string;
  /** What this rule did: Allow, Deny or Pass (to the next tier). */
  action: HitAction;
  /** The rule's index in its policy; -1 when no rule matched (a default deny, EndOfTier). */
  ruleIndex: number;
}

/** The tier netplugin.org/v3 policies are in (the model has one): what hits name for them. */
export const DEFAULT_TIER = 'default';

/** The default deny after the tier's last policy (an endpoint selected by policies none of whose rules matched). */
export const END_OF_TIER_HIT: Readonly<PolicyHit> = {
  kind: 'EndOfTier',
  namespace: '',
  name: DEFAULT_TIER,
  tier: DEFAULT_TIER,
  action: 'Deny',
  ruleIndex: -1,
};

/** The default deny after the profiles: no profile of the endpoint allowed it (or it has none). */
export const END_OF_PROFILES_HIT: Readonly<PolicyHit> = {
  kind: 'Profile',
  namespace: '',
  name: '',
  tier: '',
  action: 'Deny',
  ruleIndex: -1,
};
