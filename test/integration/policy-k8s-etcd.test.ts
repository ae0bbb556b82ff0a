// Kubernetes NetworkPolicy truth tables on the etcd datastore (policy-k8s-cases.ts).
import { defineTruthTables } from './policy-k8s-cases.js';

defineTruthTables('etcdv3', { name: 'pol-k8s', cidr: '10.77.61.0/24', blockSize: 26 }, 'npk');
