package train

// Separable is separable for the external tests (package train_test).
var Separable = separable
