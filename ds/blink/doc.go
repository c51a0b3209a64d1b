// Package blink is a B-link tree (Lehman and Yao's, as SELCC's §6.3 index) whose nodes are
// SELCC global cache lines (package ds/selcc): variable-length byte keys, values inline in the
// leaves, every node with a high key and a right-sibling pointer.
//
//	root, err := blink.Create(ctx, cluster, client, allocator)
//	t, err := blink.Open(cluster, client, allocator, root)
//	err = t.Insert(ctx, []byte("user42"), value)
//	v, err := t.Get(ctx, []byte("user42"))
//	ps, err := t.Scan(ctx, from, to, limit)
//
// # Layout
//
// A node fills one line's body: a 14-byte header (valid byte, level, entry count, right
// sibling, high key length), the high key, then sorted entries: a leaf's (key length, value
// length, key, value), an internal node's first child then (key length, key, child) per key;
// child i covers [key i-1, key i). Keys are at most LineSize/16 bytes and key+value at most
// about a third of the line ([Limits]), so both halves of a split always fit.
//
// # Concurrency
//
// Every access holds one SELCC guard at a time (two while a split writes its new line, which
// no other client can yet reach): a shared guard to read a node, an exclusive one on the leaf
// to change it. A walk releases a node before it takes the child or the right sibling, and a
// node whose high key is at or below the key sends the walk right, so a reader never waits for
// a split elsewhere. A split, under the node's exclusive guard, writes the right half to a new
// line (released, hence written back, first), then the left half with its new high key and
// sibling pointer; the separator is then posted one level up by a fresh walk from the root
// (the tree is valid without it, only slower). The root line never moves: it splits in place
// into two new lines. Nodes are never merged and lines never freed (SELCC does not free lines):
// deletes leave leaves that may be empty.
//
// Get and Update/Insert/Delete linearize at their leaf's guard. Scan reads one leaf at a time
// and continues from the high key of the last leaf read: each key's report is what a Get at the
// instant its leaf was read would return; it is not a snapshot.
//
// # Durability
//
// The tree writes what the cluster's Durability makes durable. Under selcc.WriteBackOnRelease
// (what kvstore's blink kind uses by default) a change reaches far memory when its guard is
// released, before the operation returns, so an acknowledged write survives its compute node's
// crash. Under selcc.WriteBack a dirty leaf can stay in one compute node's cache (and be
// forwarded to another writer without a write-back): a crash of that node loses the
// acknowledged writes it held, and with them possibly the tree's shape (a split's new lines, or
// a fresh root, that never left the cache): far memory may then not hold a readable tree at
// all. Use WriteBack only for a tree that can be rebuilt.
//
// # Costs (round trips)
//
// A node whose line the compute node's cache holds in a state that allows the access costs
// none: a Get on a warm cache costs 0, a write to a leaf held exclusively 0 under WriteBack and
// 1 (the write-back) under WriteBackOnRelease. Each missed line costs what selcc documents (1
// with no conflicting holder; more under contention). A split adds the new line's allocation
// (as package alloc documents) and its write-back, and the separator's walk.
//
// # The SEL baseline
//
// The same tree over a cluster opened with selcc.Options{Mode: selcc.SEL} is the paper's "B-tree
// over SEL" (§7.2): no cache; each node on a walk costs two round trips (the latch atomic with
// the line's READ, then the release with the changed range's WRITE), so every Get, Update,
// Insert or Delete on a tree of h levels costs 2h, however warm the client, and writes reach far
// memory at once. Same transport, same lines, same byte accounting as SELCC.
//
// # Limits
//
// No merges, no node reclamation; a separator lost to a lack of far memory (or a crash between
// a split and its posting) is never posted, so walks to its keys stay one sibling longer.
// Keys compare bytewise.
package blink
