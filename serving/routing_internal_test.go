package serving

// FNV64a exports fnv64a to the external tests.
var FNV64a = fnv64a
