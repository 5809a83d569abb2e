package ipam

// Source names the rule of the candidate chain that made a pool a candidate.
type Source string

// Sources, from the highest rule of Spiderpool's chain to the lowest, plus
// SourceRequest for pools a request names itself (host-local style).
const (
	SourceRequest        Source = "request"
	SourceSubnet         Source = "pod annotation ipam.spidernet.io/subnet"
	SourceSubnets        Source = "pod annotation ipam.spidernet.io/subnets"
	SourcePodIPPools     Source = "pod annotation ipam.spidernet.io/ippools"
	SourcePodIPPool      Source = "pod annotation ipam.spidernet.io/ippool"
	SourceNamespace      Source = "namespace annotation"
	SourceNetConf        Source = "CNI network config"
	SourceClusterDefault Source = "cluster default pools"
)

// Annotation keys read by Select and Filter.
const (
	AnnotationSubnet         = "ipam.spidernet.io/subnet"
	AnnotationSubnets        = "ipam.spidernet.io/subnets"
	AnnotationIPPools        = "ipam.spidernet.io/ippools"
	AnnotationIPPool         = "ipam.spidernet.io/ippool"
	AnnotationNSDefaultIPv4  = "ipam.spidernet.io/default-ipv4-ippool"
	AnnotationNSDefaultIPv6  = "ipam.spidernet.io/default-ipv6-ippool"
	AnnotationMultusDefault  = "v1.multus-cni.io/default-network"
	AnnotationMultusNetworks = "k8s.v1.cni.cncf.io/networks"
)

// Candidates is what the chain chose for one interface and one IP family:
// the pools to try, in the order they were named. The zero Candidates has no
// pools. It is a plain value.
type Candidates struct {
	Interface string
	// Family is 4 or 6.
	Family int
	// Source is the rule that chose the pools.
	Source Source
	// Pools are the pool names, wildcards expanded, duplicates dropped.
	Pools []string
	// CleanGateway asks for no default route through the pool's gateway.
	CleanGateway bool
}
