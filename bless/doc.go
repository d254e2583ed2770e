// Package bless decides whether a candidate model version may serve:
// it evaluates the candidate and the model's current default version (the
// baseline) on the same raw evaluation rows, each through its own
// Transform (Evaluate), overall and per value of categorical slice
// columns; applies a spec's thresholds to the numbers (Judge: absolute
// bounds, regressions against the baseline, the worst slice's
// regression); and checks that the candidate loads and answers in a
// throwaway prediction server within a latency bound (Infra).
//
// The result is a bundle.Blessing, the record the model repository keeps
// with the version (bundle owns its format). Nothing here knows Temporal:
// the Bless activity and `trainflow models bless` call it. Metric names
// and goals come from train.MetricDefs; the thresholds' spec from
// jobspec.BlessSpec. docs/blessing.md is the user's page.
package bless
