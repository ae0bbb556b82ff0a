// The Kubernetes manifest of the flow-log aggregator (netplugin-flows):
// `installation render` writes it when the FlowLogAggregator "default" exists,
// with the web UI when the FlowUI "default" exists too; deploy/netplugin-flows.yaml
// is this text with the UI, for the shipped image.

const FLOWS_NAMESPACE = 'kube-system';
const FLOWS_NAME = 'netplugin-flows';
const FLOWS_COLLECTOR_PORT = 7443;
const FLOWS_API_PORT = 8081;
const FLOWS_HEALTH_PORT = 9095;
/** The Secret holding the collector's certificate (tls.crt, tls.key) and the agents' CA (ca.crt). */
const FLOWS_TLS_SECRET = 'netplugin-flows-tls';
/** V8 heap bounds the aggregator runs with (the manifest's NODE_OPTIONS; bench:flows uses the same). */
const FLOWS_NODE_OPTIONS = '--max-old-space-size=128 --max-semi-space-size=4';

/** The metadata of the Service and the Deployment (the Service selects the pods by the same label). */
const APP_METADATA = `metadata:
  name: ${FLOWS_NAME}
  namespace: ${FLOWS_NAMESPACE}
  labels:
    k8s-app: ${FLOWS_NAME}`;

interface FlowsManifestOptions {
  image: string;
  /** Serve the web UI at / of the API address (the FlowUI resource). */
  ui: boolean;
}

export function flowsManifest(o: FlowsManifestOptions): string {
  return `# netplugin-flows: the flow-log aggregator (docs/flows.md). Agents stream flow records to the
# collector (Service ${FLOWS_NAME}:${FLOWS_COLLECTOR_PORT}, HTTP/2 with mTLS: an agent presents a certificate signed
# by the CA in the Secret's ca.crt); the HTTP API${o.ui ? ' and the web UI' : ''} listen on the pod's loopback only:
#   kubectl -n ${FLOWS_NAMESPACE} port-forward deploy/${FLOWS_NAME} ${FLOWS_API_PORT}
#   # then http://127.0.0.1:${FLOWS_API_PORT}/
# Flows are kept in memory (one replica; --retention, default 1h). The aggregator reads nothing from
# the Kubernetes API: its ServiceAccount has no role and no token is mounted.
apiVersion: v1
kind: ServiceAccount
metadata:
  name: ${FLOWS_NAME}
  namespace: ${FLOWS_NAMESPACE}
automountServiceAccountToken: false
---
# The collector's TLS. Keys: tls.crt, tls.key (its certificate and key), ca.crt (the CA that signs
# the agents' client certificates), PEM, e.g.
#   kubectl -n ${FLOWS_NAMESPACE} create secret generic ${FLOWS_TLS_SECRET} \\
#     --from-file=tls.crt=aggregator.crt --from-file=tls.key=aggregator.key --from-file=ca.crt=agents-ca.crt \\
#     --dry-run=client -o yaml | kubectl apply -f -
apiVersion: v1
kind: Secret
metadata:
  name: ${FLOWS_TLS_SECRET}
  namespace: ${FLOWS_NAMESPACE}
type: Opaque
data: {}
---
apiVersion: v1
kind: Service
${APP_METADATA}
spec:
  selector:
    k8s-app: ${FLOWS_NAME}
  ports:
    - name: collector
      port: ${FLOWS_COLLECTOR_PORT}
      targetPort: collector
      protocol: TCP
---
apiVersion: apps/v1
kind: Deployment
${APP_METADATA}
spec:
  replicas: 1
  strategy:
    type: Recreate
  selector:
    matchLabels:
      k8s-app: ${FLOWS_NAME}
  template:
    metadata:
      labels:
        k8s-app: ${FLOWS_NAME}
    spec:
      serviceAccountName: ${FLOWS_NAME}
      automountServiceAccountToken: false
      nodeSelector:
        kubernetes.io/os: linux
      containers:
        - name: ${FLOWS_NAME}
          image: ${o.image}
          command: ["node", "/opt/netplugin/dist/netplugin-flows.mjs"]
          args:
            - --collector-addr=:${FLOWS_COLLECTOR_PORT}
            - --tls-cert=/etc/netplugin-flows/tls/tls.crt
            - --tls-key=/etc/netplugin-flows/tls/tls.key
            - --client-ca=/etc/netplugin-flows/tls/ca.crt
            - --api-addr=127.0.0.1:${FLOWS_API_PORT}
            - --health-addr=:${FLOWS_HEALTH_PORT}
            - --retention=1h
            - --ui=${o.ui}
          env:
            # Live data is ~25 MiB of heap plus the buckets' typed arrays (outside the heap): bounded
            # heap spaces keep the garbage of parsed batches from growing the RSS (docs/performance.md).
            - name: NODE_OPTIONS
              value: "${FLOWS_NODE_OPTIONS}"
          ports:
            - name: collector
              containerPort: ${FLOWS_COLLECTOR_PORT}
              protocol: TCP
            - name: health
              containerPort: ${FLOWS_HEALTH_PORT}
              protocol: TCP
          livenessProbe:
            httpGet:
              path: /healthz
              port: ${FLOWS_HEALTH_PORT}
            periodSeconds: 10
          readinessProbe:
            httpGet:
              path: /readyz
              port: ${FLOWS_HEALTH_PORT}
            periodSeconds: 10
          resources:
            requests:
              cpu: 100m
              memory: 256Mi
            limits:
              memory: 512Mi
          securityContext:
            runAsNonRoot: true
            runAsUser: 65534
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
          volumeMounts:
            - name: tls
              mountPath: /etc/netplugin-flows/tls
              readOnly: true
      volumes:
        - name: tls
          secret:
            secretName: ${FLOWS_TLS_SECRET}
`;
}
