// Package cidertest_test holds the tests of the CIDER reproduction (bench/repro's Cider
// functions): the shape of its figures at reduced size, its determinism, and the band re-run
// of its headline points. They are a package of their own so that each of bench/repro's test
// packages stays within the suite's time budget per package. The shape test runs without the
// race detector only (norace_test.go), in the README test command's second part.
package cidertest_test
