package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
)

func runKV(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var ff fabricFlags
	fs := flag.NewFlagSet("farmem kv", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ff.register(fs, flagUse{transports: "cxl or tcp", creates: true, defaultSize: "64MiB",
		region: "cxl: the region file; put, insert and update create it if missing (--mem-nodes × --mem-size, allocated at once)"})
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: farmem kv (--region PATH | --cluster FILE) COMMAND KEY [VALUE]

commands:
  get KEY             print the value (exit status 1 if the key is absent)
  put KEY VALUE       insert or update
  insert KEY VALUE    insert; fails if the key exists
  update KEY VALUE    update; fails if the key is absent
  delete KEY          delete; fails if the key is absent
A VALUE of - is read from standard input. A --region that does not exist is created by
put, insert and update, with --mem-nodes memory nodes of --mem-size each (it says how big).
With --cluster FILE the store lives on farmemd memory nodes (see docs/cluster.md).

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := ff.resolve(); err != nil {
		return err
	}
	switch {
	case ff.transport == "local" || ff.transport == "sim":
		return usageErr("the %s transport forgets everything when the command ends: use --region or --cluster", ff.transport)
	case ff.transport == "cxl" && ff.region == "":
		return usageErr("name the region with --region PATH (it is created if missing)")
	}
	rest := fs.Args()
	if len(rest) < 2 {
		fs.Usage()
		return usageErr("want a command and a key")
	}
	cmd, key := rest[0], []byte(rest[1])
	needValue := cmd == "put" || cmd == "insert" || cmd == "update"
	switch {
	case cmd != "get" && cmd != "delete" && !needValue:
		return usageErr("unknown kv command %q", cmd)
	case needValue && len(rest) != 3, !needValue && len(rest) != 2:
		return usageErr("%s takes %s", cmd, map[bool]string{true: "a key and a value", false: "a key"}[needValue])
	}
	var value []byte
	if needValue {
		value = []byte(rest[2])
		if rest[2] == "-" {
			var err error
			if value, err = io.ReadAll(os.Stdin); err != nil {
				return err
			}
		}
	}
	f, err := ff.open(ctx, 1, cmd != "get" && cmd != "delete", stderr)
	if err != nil {
		return err
	}
	defer f.Close()
	s, err := kvstore.Open(ctx, f.Fabric, kvstore.Options{NoCreate: !needValue, MaxClients: 1})
	if errors.Is(err, kvstore.ErrNoStore) && !storeExists(ctx, f) {
		return fmt.Errorf("%s: no store here yet (put a key first)", cmd)
	}
	if err != nil {
		return err
	}
	defer s.Close()
	switch cmd {
	case "get":
		v, err := s.Get(ctx, key)
		if errors.Is(err, kvstore.ErrNotFound) {
			return fmt.Errorf("%q: not found", key)
		}
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", v)
		return err
	case "put":
		return s.Put(ctx, key, value)
	case "insert":
		return s.Insert(ctx, key, value)
	case "update":
		return s.Update(ctx, key, value)
	}
	return s.Delete(ctx, key)
}

// storeExists reports whether f holds a store (its root word is ready): Open's ErrNoStore
// with one is a memory node that came back empty, not a store never made.
func storeExists(ctx context.Context, f farmem.Fabric) bool {
	m, err := f.Open(ctx, f.Hosted()[0])
	if err != nil {
		return false
	}
	defer m.Close()
	in, err := kvstore.Inspect(ctx, m)
	return err == nil && in.Word.State() == kvstore.RootReady
}
