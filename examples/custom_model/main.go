// Command custom_model is trainflow with one model type of its own,
// "polynomial" (polynomial.go): the trainflow binary's commands (dev,
// worker, serve, jobs …) through cli.Main, its workers training and its
// server serving the built-in types and this one. Job specs name it:
//
//	{"job_id": "poly_1", "model": {"type": "polynomial", "config": {"degree": 3}}}
package main

import (
	"fmt"
	"os"

	"github.com/trainflow/trainflow/cli"
	"github.com/trainflow/trainflow/train"
)

func main() {
	types := train.Builtins()
	if err := types.Register(PolynomialModel, NewPolynomial); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(cli.Main(os.Args[1:], cli.Options{ModelTypes: types}))
}
