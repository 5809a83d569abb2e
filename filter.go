package ipam

// Reason is the machine-readable cause of a filtered pool.
type Reason string

// Reasons a pool is not used for an interface, in the order Filter checks them.
const (
	ReasonNotFound          Reason = "not-found"
	ReasonTerminating       Reason = "terminating"
	ReasonDisabled          Reason = "disabled"
	ReasonFamily            Reason = "ip-family"
	ReasonNodeName          Reason = "node-name"
	ReasonNodeAffinity      Reason = "node-affinity"
	ReasonNamespaceName     Reason = "namespace-name"
	ReasonNamespaceAffinity Reason = "namespace-affinity"
	ReasonPodAffinity       Reason = "pod-affinity"
	ReasonMultusName        Reason = "multus-name"
	ReasonExcluded          Reason = "fully-excluded"
	ReasonReserved          Reason = "fully-reserved"
	ReasonExhausted         Reason = "exhausted"
)
