// Compiled twice by cpu.layers.WrongWayIncludeFailsToCompile: against the
// runtime layer it must compile (the control), against the foundation layer
// it must not, because the foundation cannot see a header of a layer above
// it.
#include "baton/runtime.h"

int BatonLayerProbe() { return sizeof(baton::RuntimeOptions) > 0 ? 0 : 1; }
