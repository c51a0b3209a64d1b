package bench

import "context"

// nopSession succeeds at everything and stores nothing.
type nopSession struct{}

func (nopSession) Read(ctx context.Context, key []byte) ([]byte, error) { return nil, nil }
func (nopSession) Insert(ctx context.Context, key, value []byte) error  { return nil }
func (nopSession) Update(ctx context.Context, key, value []byte) error  { return nil }
func (nopSession) Scan(ctx context.Context, start []byte, n int, visit func(key, value []byte)) (int, error) {
	return n, nil
}
func (nopSession) Close() error { return nil }
