// header_cxx.cc - compiles the public header as C++ (it must be valid C++11 as well as C11).
#include "nemotron.h"

int nemotron_header_compiles_as_cxx() {
    nemotron_model_params p = nemotron_model_default_params();
    return p.n_threads + (nemotron_status_str(NEMOTRON_OK) != nullptr);
}
