package kubegc

// DefaultPageSize is the number of claims of a page when Options.PageSize
// is zero: the page size of kubectl's lists.
const DefaultPageSize = 500
