// Package selcctest_test holds the tests of the SELCC reproduction (bench/repro's Selcc
// functions): its determinism, its exact round trips per operation at reduced size, and its
// configuration errors. They are a package of their own so that each of bench/repro's test
// packages stays within the suite's time budget per package.
package selcctest_test
