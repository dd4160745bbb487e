// A backend whose entry point was declared without extern "C": the symbol gets a C++ name.
struct nnp_version { unsigned major, minor, patch; };
static const unsigned table[4] = {1, 0, 0, 0};
__attribute__((visibility("default"))) const void* nnp_backend_entry(const nnp_version*) { return table; }
