//go:build !race

package main

// raceShadow is how many times its own size the memory a process touches costs it in resident
// memory: once, without the race detector.
const raceShadow = 1
