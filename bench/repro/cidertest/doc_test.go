// Package cidertest_test holds the tests of the CIDER reproduction (bench/repro's Cider
// functions): the shape of its figures at reduced size, its determinism, and the band re-run
// of its headline points. They are a package of their own so that each of bench/repro's test
// packages stays within the suite's time budget per package.
package cidertest_test
