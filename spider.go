package ipam

import "go4.org/netipx"

// This file holds what package subnet builds SpiderSubnets from: the
// addresses of a pool, the checks Spiderpool applies to SpiderIPPools and
// SpiderSubnets alike, and the error of a bad annotation.

// Addresses returns the pool's allocatable addresses: its range set less its
// excluded addresses and its gateways. The pool must be valid.
func (p *Pool) Addresses() *netipx.IPSet { return p.usable(nil) }

// ValidateSpiderSpec checks the SpiderIPPool-form fields of p (subnet,
// ipVersion, ips, excludeIPs, gateway, routes) by the rules Spiderpool's
// webhook applies to SpiderIPPools and SpiderSubnets alike, and returns every
// problem at once, each a *FieldError naming object (such as `subnet "s1"`)
// and saying kind ("pool", "subnet") in its reason. p.Subnet must be set.
// Pool.Validate applies it to pools; package subnet to SpiderSubnets.
func ValidateSpiderSpec(p *Pool, object, kind string) error {
	fe := &fieldErrors{object: object}
	p.validateSpider(fe, kind)
	return fe.err()
}

// NewAnnotationError returns the problem reason with the value of annotation
// key, which unwraps to err (ErrInvalid, ErrNotFound ...); a long value is
// cut, as every AnnotationError's is.
func NewAnnotationError(key, value, reason string, err error) *AnnotationError {
	return (&annotationParser{key: key, value: value}).newError(reason, err)
}

// ParsePoolFields parses data as UnmarshalJSON does, without giving up at the
// first bad field: it returns the pool with every field that parsed, and the
// problems of those that did not (each a *FieldError, joined; nil if none).
// err is set only for a document it cannot read at all. Package subnet reads
// SpiderSubnet specs, whose fields are a subset of a pool's, with it.
func ParsePoolFields(data []byte) (p *Pool, problems, err error) {
	p, fe, err := parsePool(data)
	if err != nil {
		return nil, nil, err
	}
	return p, fe.err(), nil
}
