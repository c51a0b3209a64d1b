package transport

// OrderedReader is an optional method of a Memory (a transport implements it; package far asks for
// it). ReadsInAddressOrder reports true when every Read of this Memory copies its words in
// ascending address order, each word's load ordered after the previous one's as seen by other
// clients' stores (plain loads under x86-TSO, or sequentially consistent atomic loads), and when a
// batch's Writes to one node become visible in batch order. Then a structure may check a record
// framed by two copies of a version with one Read instead of a batch of three (package far does,
// for single-writer pointers). A NIC's DMA promises no such order, nor does the simulator: a
// Memory that does not implement the method, or returns false, is taken not to read in order. The
// answer holds for the life of the Memory.
type OrderedReader interface {
	ReadsInAddressOrder() bool
}
