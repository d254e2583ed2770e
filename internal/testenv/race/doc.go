// Package race tells tests whether they run under the race detector, in
// one place instead of a race_test.go/norace_test.go pair per package.
package race
