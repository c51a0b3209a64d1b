package local

// ReadsInAddressOrder implements transport.OrderedReader: a Read copies word by word in ascending
// order with sequentially consistent atomic loads (with Tearing or Jitter too, which only yield
// between the words), and a batch's ops apply in order.
func (c *client) ReadsInAddressOrder() bool { return true }
