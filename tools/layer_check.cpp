// The layer checks (CMakeLists.txt "layer checks"): linked with one layer's objects whole and the
// layers below it, this program only exists if that layer calls nothing above it. Running it
// proves nothing more; building it is the check.
int main() { return 0; }
