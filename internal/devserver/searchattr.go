package devserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
)

// ErrSearchAttributeType reports that a requested custom search attribute
// already exists in the namespace, or is a system attribute, with another
// type. A custom attribute's type cannot be changed in place.
var ErrSearchAttributeType = errors.New("devserver: search attribute exists with another type")

// validateSearchAttributes checks that every requested attribute has a name
// and a type.
func validateSearchAttributes(want map[string]enumspb.IndexedValueType) error {
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if strings.TrimSpace(name) == "" {
			return errors.New("search attribute with an empty name")
		}
		t := want[name]
		if _, ok := enumspb.IndexedValueType_name[int32(t)]; !ok || t == enumspb.INDEXED_VALUE_TYPE_UNSPECIFIED {
			return fmt.Errorf("search attribute %s: invalid type %v", name, t)
		}
	}
	return nil
}

// missingSearchAttributes returns the attributes of want absent from both
// custom and system. It returns an error wrapping ErrSearchAttributeType,
// naming each attribute, when any attribute of want exists in custom or
// system with another type.
func missingSearchAttributes(want, custom, system map[string]enumspb.IndexedValueType) (map[string]enumspb.IndexedValueType, error) {
	missing := make(map[string]enumspb.IndexedValueType)
	var conflicts []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		wantType := want[name]
		have, ok := custom[name]
		if !ok {
			have, ok = system[name]
		}
		switch {
		case !ok:
			missing[name] = wantType
		case have != wantType:
			conflicts = append(conflicts, fmt.Sprintf("%s is %v, want %v", name, have, wantType))
		}
	}
	if len(conflicts) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrSearchAttributeType, strings.Join(conflicts, "; "))
	}
	return missing, nil
}

// ensureSearchAttributes makes every attribute of want exist in namespace
// with its type, adding only the missing ones. Errors that retrying cannot
// fix are wrapped in permanentError.
func ensureSearchAttributes(ctx context.Context, ops operatorservice.OperatorServiceClient, namespace string, want map[string]enumspb.IndexedValueType) error {
	if len(want) == 0 {
		return nil
	}
	missing, err := listMissing(ctx, ops, namespace, want)
	if err != nil || len(missing) == 0 {
		return err
	}
	_, err = ops.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		SearchAttributes: missing,
		Namespace:        namespace,
	})
	if err != nil {
		err = fmt.Errorf("add search attributes %v: %w", slices.Sorted(maps.Keys(missing)), err)
		var invalid *serviceerror.InvalidArgument
		if errors.As(err, &invalid) {
			// For example more attributes of one type than SQLite has
			// pre-allocated columns for.
			return &permanentError{err}
		}
		return err
	}
	missing, err = listMissing(ctx, ops, namespace, want)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("search attributes %v not listed after adding them", slices.Sorted(maps.Keys(missing)))
	}
	return nil
}

// listMissing lists the search attributes of namespace and returns those of
// want that are missing; a type conflict is a permanentError.
func listMissing(ctx context.Context, ops operatorservice.OperatorServiceClient, namespace string, want map[string]enumspb.IndexedValueType) (map[string]enumspb.IndexedValueType, error) {
	list, err := ops.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return nil, fmt.Errorf("list search attributes: %w", err)
	}
	missing, err := missingSearchAttributes(want, list.GetCustomAttributes(), list.GetSystemAttributes())
	if err != nil {
		return nil, &permanentError{fmt.Errorf("namespace %s: %w", namespace, err)}
	}
	return missing, nil
}
