// The model shapes decode_loop runs (--models).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "baton/decoder_config.h"

namespace baton::samples {

// tiny: where orchestration dominates (2 layers, d_model 256). small: about
// 4 layers, d_model 1024, a 32k vocabulary (82M parameters).
inline absl::StatusOr<DecoderConfig> ModelPreset(const std::string& name, DecoderDType dtype) {
  DecoderConfig c;
  c.dtype = dtype;
  c.max_context = 2048;  // prompts of realistic length, read in chunks
  if (name == "tiny") {
    c.layers = 2;
    c.d_model = 256;
    c.heads = 4;
    c.head_dim = 64;
    c.ffn = 768;
    c.vocab = 4096;
  } else if (name == "small") {
    c.layers = 4;
    c.d_model = 1024;
    c.heads = 16;
    c.head_dim = 64;
    c.ffn = 2816;
    c.vocab = 32000;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--models: unknown preset '", name, "'; use tiny or small"));
  }
  return c;
}

}  // namespace baton::samples
