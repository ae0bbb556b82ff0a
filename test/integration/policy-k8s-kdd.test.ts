// Kubernetes NetworkPolicy truth tables on the kubernetes datastore (policy-k8s-cases.ts).
import { defineTruthTables } from './policy-k8s-cases.js';

defineTruthTables('kubernetes', { name: 'pol-kdd', cidr: '10.77.64.0/24', blockSize: 26 }, 'npd');
