package idx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrNoDataset is wrapped by errors about a dataset directory that lacks
// one of the four IDX files.
var ErrNoDataset = errors.New("idx: dataset not found")

// Split is one split of an image classification dataset: N images of
// Width values each (row-major bytes, 0–255) and their labels.
type Split struct {
	N, Width int
	Images   []byte
	Labels   []byte
}

// Image returns image i's values.
func (s *Split) Image(i int) []byte { return s.Images[i*s.Width : (i+1)*s.Width] }

// splitFile finds dir/<split>-<kind>-idx<d>-ubyte, plain or .gz.
func splitFile(dir, split, kind string, dims int) (string, error) {
	base := filepath.Join(dir, fmt.Sprintf("%s-%s-idx%d-ubyte", split, kind, dims))
	for _, name := range []string{base + ".gz", base} {
		if _, err := os.Stat(name); err == nil {
			return name, nil
		}
	}
	return "", fmt.Errorf("%s[.gz]", base)
}

// ReadSplit reads split ("train" or "t10k") of the MNIST-layout dataset in
// dir. pkg names the dataset's Debian package for the error when the files
// are missing, e.g. "dataset-fashion-mnist".
func ReadSplit(dir, split, pkg string) (*Split, error) {
	images, err := splitFile(dir, split, "images", 3)
	if err != nil {
		return nil, fmt.Errorf("%w: no %s (apt-get install %s, or set data.dir to a directory holding the MNIST-format files)", ErrNoDataset, err, pkg)
	}
	labels, err := splitFile(dir, split, "labels", 1)
	if err != nil {
		return nil, fmt.Errorf("%w: no %s (apt-get install %s, or set data.dir to a directory holding the MNIST-format files)", ErrNoDataset, err, pkg)
	}
	im, err := ReadFile(images)
	if err != nil {
		return nil, err
	}
	lb, err := ReadFile(labels)
	if err != nil {
		return nil, err
	}
	if len(im.Dims) != 3 || len(lb.Dims) != 1 || im.Dims[0] != lb.Dims[0] {
		return nil, fmt.Errorf("%w: %s has dimensions %v and %s %v (want [N rows cols] and [N])", ErrFormat, images, im.Dims, labels, lb.Dims)
	}
	return &Split{N: im.Dims[0], Width: im.Dims[1] * im.Dims[2], Images: im.Data, Labels: lb.Data}, nil
}
