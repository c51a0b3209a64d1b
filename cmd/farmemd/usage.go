package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
)

const serveUsage = `usage: farmemd [serve] --id N --size SIZE --secret-file PATH [flags]
       farmemd status --addr HOST:PORT --secret-file PATH
       farmemd secret > PATH

A farmem memory node: it owns SIZE bytes of memory and serves one-sided verbs on them to
compute processes that prove the cluster secret. It listens on loopback unless --listen says
otherwise; SIGTERM or SIGINT stop it cleanly. Its memory does not survive it: a node that
restarts comes back empty, and clients see it lost until ` + "`farmem adopt`" + `.

commands:
  serve    run the memory node (the default)
  status   ask a running node for its health and counters (JSON)
  secret   print a fresh cluster secret, for the file every node and client reads

See docs/cluster.md for a three-node cluster on one machine.

flags of serve:
`

// printSecret prints a fresh cluster secret: 32 bytes from the system's random source, in
// hex (64 characters, a line). Every farmemd and every client of a cluster reads the same
// one from its secret file.
func printSecret(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("farmemd secret", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: farmemd secret > PATH\n\nPrints a fresh cluster secret (32 random bytes in hex) on a line. Keep the file private\n(chmod 600): anyone who reads it can read and write the cluster's memory.\n")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "farmemd secret: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		fmt.Fprintln(stderr, "farmemd secret:", err)
		return 1
	}
	fmt.Fprintln(stdout, hex.EncodeToString(b[:]))
	return 0
}
