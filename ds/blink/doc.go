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
// all. Use WriteBack only for a tree that can be rebuilt. A peer that is only late loses
// nothing in either mode: the operation that gave up on it (selcc.Options.ReplyTimeout) fails
// with farmem.ErrNodeDown, having possibly taken effect, and a line the peer hands over after
// that is written back by the node it went to (package selcc, Recovery).
//
// # Recovery
//
// A compute node that crashes leaves its holds in the latch words of the lines it cached. A
// walk of a survivor that meets one (selcc.HolderDownError: the fabric reports the holder down)
// repairs that line online and retries: it waits until the fabric's down timeout has passed
// since its handle first saw the node down, removes the node's holds from the line's word
// (selcc.Client.RepairLine: one READ, one CAS) and takes the line from far memory, which under
// selcc.WriteBackOnRelease holds every write the dead node acknowledged (each was written back
// when its guard was released, before the operation returned). Only the lines survivors ask for
// are repaired, each once; no scan, no quiet period ([Tree.Repair] over [Tree.Lines] needs one
// and remains for an operator's sweep). Stats.Repairs counts the holds a handle removed. A
// client that crashes alone (its node lives) hands its latches to its node (package selcc,
// Recovery) and its later operations fail with selcc.ErrClientDown.
//
// Limits: the repair trusts the fabric's report that a node is down as fail-stop (the
// simulator's Crash; a process the operator killed); a node that is only slow or cut off is not
// repaired, and a walk that meets it fails with farmem.ErrNodeDown after
// selcc.Options.ReplyTimeout. Bitmap codec only (up to 58 compute nodes), not under EagerForward
// (the walk then fails as before). Under selcc.WriteBack the dead node's dirty lines are lost
// with it (see Durability). The SEL baseline sends no invalidations and is not repaired.
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
