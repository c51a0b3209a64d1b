//go:build race

package main

// raceShadow is how many times its own size the memory a process touches costs it in resident
// memory: under the race detector, each touched byte also touches its shadow.
const raceShadow = 3
