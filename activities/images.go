package activities

import (
	"context"
	"fmt"

	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"

	"github.com/trainflow/trainflow/workflows"
)

// imageFiles finds the four IDX files of an image preset in data.dir
// (each plain or .gz): the train images and labels, then the t10k ones.
// Missing files fail the job for good, naming the path looked at and
// where to get the dataset.
func (a *Activities) imageFiles(ctx context.Context, spec jobspec.JobSpec) (train, eval []string, err error) {
	dir := spec.Data.Dir
	if _, err := a.locateData("data.dir", dir); err != nil {
		return nil, nil, err
	}
	for _, split := range []struct {
		name string
		out  *[]string
	}{{"train", &train}, {"t10k", &eval}} {
		for _, kind := range []string{"images-idx3", "labels-idx1"} {
			name := fmt.Sprintf("%s-%s-ubyte", split.name, kind)
			found := ""
			for _, cand := range []string{name + ".gz", name} {
				loc, err := a.locateData("data.dir", joinURI(dir, cand))
				if err != nil {
					return nil, nil, err
				}
				ok, err := inputExists(ctx, loc)
				if err != nil {
					return nil, nil, err
				}
				if ok {
					found = loc
					break
				}
			}
			if found == "" {
				return nil, nil, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: data.dir %s: no %s[.gz] there: %s",
					jobspec.ErrInvalid, dir, name, DatasetHint(spec.Preset)))
			}
			*split.out = append(*split.out, found)
		}
	}
	return train, eval, nil
}

// DatasetHint says where to get an image preset's dataset.
func DatasetHint(preset string) string {
	if jobspec.ImageDataset(preset) == jobspec.PresetMNIST {
		return "the " + preset + " preset reads MNIST's four IDX files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz; " +
			"from http://yann.lecun.com/exdb/mnist/ or a mirror of it, no Debian package has them): put them in " + jobspec.ImageDataDirs[jobspec.PresetMNIST] +
			" or in a directory inside the worker's --data-roots and set data.dir to it (or list the files in data.train and data.eval)"
	}
	return "the " + preset + " preset reads Fashion-MNIST's four IDX files: apt-get install dataset-fashion-mnist (installs them in " +
		jobspec.ImageDataDirs[jobspec.PresetFashionMNIST] + "), or set data.dir to a directory inside the worker's --data-roots holding them"
}

// inputExists reports whether the data file at p (a path or a storage
// URI, as locate returns it) exists.
func inputExists(ctx context.Context, p string) (bool, error) {
	return jobdir.Exists(ctx, p)
}
