// baton._baton: the native half of the Python package (python/baton/llm.py is
// the public class). Binds baton::Server (include/baton/server.h, the serving
// layer every front end shares); every call that may wait for the GPU
// releases the GIL. A Status that is not OK raises the Python exception
// python/baton/errors.py registers for its code, carrying the Status message.
// The package reads its option defaults and the device's limits from here
// (defaults(), limits()) rather than restating them.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "baton/decoder_config.h"
#include "baton/decoder_model.h"
#include "baton/server.h"

namespace nb = nanobind;

namespace baton {
namespace {

// A Status on its way to Python: the translator below raises it.
struct StatusError {
  absl::StatusCode code;
  std::string message;
};

void Check(const absl::Status& status) {
  if (!status.ok()) throw StatusError{status.code(), std::string(status.message())};
}

template <typename T>
T Value(absl::StatusOr<T> result) {
  Check(result.status());
  return *std::move(result);
}

// Exception classes by absl::StatusCode, set by python/baton/errors.py.
nb::dict& ErrorTypes() {
  static auto* types = new nb::dict();  // never freed: translators run until exit
  return *types;
}

void Translate(const std::exception_ptr& error, void*) {
  try {
    std::rethrow_exception(error);
  } catch (const StatusError& e) {
    const nb::int_ key(static_cast<int>(e.code));
    const nb::object type =
        ErrorTypes().contains(key) ? nb::object(ErrorTypes()[key]) : nb::borrow(PyExc_RuntimeError);
    PyErr_SetString(type.ptr(), e.message.c_str());
  }
}

ServerOptions MakeOptions(const std::string& checkpoint, std::uint32_t max_batch,
                          std::uint32_t max_context, std::uint32_t max_tokens_per_step,
                          std::uint32_t max_tokens_without_decodes, std::uint32_t max_chunk_tokens,
                          std::uint32_t max_requests, const std::string& dtype,
                          const std::string& gemm, const std::string& engine,
                          std::uint32_t stream_window, std::uint32_t max_logprobs,
                          std::uint32_t tensor_parallel_size) {
  ServerOptions options;
  options.model.checkpoint = checkpoint;
  options.model.max_batch = max_batch;
  options.model.max_context = max_context;
  options.model.max_tokens_per_step = max_tokens_per_step;
  options.model.max_tokens_without_decodes = max_tokens_without_decodes;
  options.model.max_chunk_tokens = max_chunk_tokens;
  options.model.max_requests = max_requests;
  options.model.dtype = Value(ParseDType(dtype));
  options.model.gemm = Value(ParseGemm(gemm));
  options.model.stream_window = stream_window;
  options.model.max_logprobs = max_logprobs;
  options.engine = Value(ParseEngine(engine));
  // (an unsigned value past int's range stays out of range after the cast)
  options.tensor_parallel_size =
      tensor_parallel_size > 1024 ? 1024 : static_cast<int>(tensor_parallel_size);
  return options;
}

#define BATON_OPTION_ARGS                                                                      \
  nb::arg("checkpoint"), nb::arg("max_batch"), nb::arg("max_context"),                         \
      nb::arg("max_tokens_per_step"), nb::arg("max_tokens_without_decodes"),                   \
      nb::arg("max_chunk_tokens"), nb::arg("max_requests"), nb::arg("dtype"), nb::arg("gemm"), \
      nb::arg("engine"), nb::arg("stream_window"), nb::arg("max_logprobs") = kMaxLogprobs,     \
      nb::arg("tensor_parallel_size") = 1

std::unique_ptr<Server> CreateServer(const std::string& checkpoint, std::uint32_t max_batch,
                                     std::uint32_t max_context, std::uint32_t max_tokens_per_step,
                                     std::uint32_t max_tokens_without_decodes,
                                     std::uint32_t max_chunk_tokens, std::uint32_t max_requests,
                                     const std::string& dtype, const std::string& gemm,
                                     const std::string& engine, std::uint32_t stream_window,
                                     std::uint32_t max_logprobs,
                                     std::uint32_t tensor_parallel_size,
                                     std::optional<nb::callable> load_progress) {
  ServerOptions options = MakeOptions(checkpoint, max_batch, max_context, max_tokens_per_step,
                                      max_tokens_without_decodes, max_chunk_tokens, max_requests,
                                      dtype, gemm, engine, stream_window, max_logprobs,
                                      tensor_parallel_size);
  if (load_progress.has_value()) {
    // Called on this thread with the GIL released: take it back for the call.
    // An exception the callable raises is printed, not propagated (loading goes on).
    options.model.load_progress = [callback = *load_progress](std::uint64_t done,
                                                              std::uint64_t total) {
      nb::gil_scoped_acquire acquire;
      try {
        callback(done, total);
      } catch (nb::python_error& e) {
        e.discard_as_unraisable("baton load_progress");
      }
    };
  }
  absl::StatusOr<std::unique_ptr<Server>> server;
  {
    nb::gil_scoped_release release;  // loading a checkpoint takes seconds
    server = Server::Create(options);
  }
  return Value(std::move(server));
}

// requests: [(prompt, max_new_tokens, stop_tokens, temperature, top_k, top_p, seed,
// sequence_id, presence_penalty, frequency_penalty, repetition_penalty,
// min_tokens, logprobs)]; (seed, sequence_id) key the request's sampling
// stream; logprobs -1: none.
using RequestTuple =
    std::tuple<std::vector<std::int32_t>, std::uint32_t, std::vector<std::int32_t>, float,
               std::uint32_t, float, std::uint64_t, std::uint64_t, float, float, float,
               std::uint32_t, std::int32_t>;

std::vector<std::uint64_t> Submit(Server& server, const std::vector<RequestTuple>& requests) {
  std::vector<DecodeRequest> decoded(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& [prompt, max_new_tokens, stop_tokens, temperature, top_k, top_p, seed,
                 sequence_id, presence, frequency, repetition, min_tokens, logprobs] = requests[i];
    decoded[i].prompt = prompt;
    decoded[i].max_new_tokens = max_new_tokens;
    decoded[i].stop_tokens = stop_tokens;
    decoded[i].sampling =
        SamplingParams{temperature, seed, top_k, top_p, presence, frequency, repetition, min_tokens};
    decoded[i].sequence_id = sequence_id;
    decoded[i].logprobs = logprobs;
  }
  absl::StatusOr<std::vector<std::uint64_t>> ids;
  {
    nb::gil_scoped_release release;
    ids = server.Submit(decoded);
  }
  return Value(std::move(ids));
}

nb::list Poll(Server& server, double timeout_s) {
  absl::StatusOr<std::vector<ServerEvent>> events;
  {
    nb::gil_scoped_release release;
    events = server.Poll(absl::Seconds(timeout_s));
  }
  nb::list out;
  for (ServerEvent& event : Value(std::move(events))) {
    // None: no logprobs asked (or already lost); a str: they were lost now;
    // else a (logprob, [(token, logprob)]) per token.
    nb::object logprobs = nb::none();
    if (!event.logprobs_error.empty()) {
      logprobs = nb::str(event.logprobs_error.c_str());
    } else if (!event.logprobs.empty()) {
      nb::list per_token;
      for (const TokenLogprobs& t : event.logprobs) {
        nb::list top;
        for (std::size_t j = 0; j < t.top_tokens.size(); ++j) {
          top.append(nb::make_tuple(t.top_tokens[j], t.top_logprobs[j]));
        }
        per_token.append(nb::make_tuple(t.logprob, top));
      }
      logprobs = per_token;
    }
    out.append(nb::make_tuple(event.id, nb::cast(event.tokens), event.finished, logprobs));
  }
  return out;
}

nb::dict Info(const Server& server) {
  const DecoderModel& model = server.model();
  const DecoderConfig& config = model.config();
  nb::dict info;
  info["source"] = model.info().source;
  info["architecture"] = model.info().architecture;
  info["eos_token_ids"] = nb::cast(model.info().eos_token_ids);
  info["context_limit"] = model.info().context_limit;
  info["vocab_size"] = config.vocab;
  info["max_context"] = config.max_context;
  info["layers"] = config.layers;
  info["hidden_size"] = config.d_model;
  info["dtype"] = DTypeName(config.dtype);
  info["max_batch"] = model.options().max_batch;
  info["max_tokens_per_step"] = model.options().max_tokens_per_step;
  info["max_tokens_without_decodes"] = model.options().max_tokens_without_decodes;
  info["max_requests"] = model.options().max_requests;
  info["max_logprobs"] = model.options().max_logprobs;
  info["engine"] = EngineName(server.engine());
  info["weight_bytes"] = model.weight_bytes();
  info["kv_page_tokens"] = model.info().kv_page_tokens;
  info["kv_pool_pages"] = model.info().kv_pool_pages;
  return info;
}

// ServerOptions{}'s values under the names the package's options take.
nb::dict Defaults() {
  const ServerOptions options;
  const DecoderModelOptions& m = options.model;
  nb::dict out;
  out["max_batch"] = m.max_batch;
  out["max_context"] = m.max_context;
  out["max_tokens_per_step"] = m.max_tokens_per_step;
  out["max_tokens_without_decodes"] = m.max_tokens_without_decodes;
  out["max_chunk_tokens"] = m.max_chunk_tokens;
  out["max_requests"] = m.max_requests;
  out["dtype"] = m.dtype ? DTypeName(*m.dtype) : "auto";
  out["gemm"] = GemmName(m.gemm);
  out["engine"] = EngineName(options.engine);
  out["stream_window"] = m.stream_window;
  out["max_logprobs"] = m.max_logprobs;
  out["tensor_parallel_size"] = options.tensor_parallel_size;
  return out;
}

// What a request may ask of the device.
nb::dict Limits() {
  nb::dict out;
  out["max_stop_tokens"] = kMaxStopTokens;
  out["max_vocab"] = kDecoderMaxVocab;
  out["max_context"] = kDecoderMaxContext;
  out["max_logprobs"] = kMaxLogprobs;
  return out;
}

nb::dict Stats(const Server& server) {
  const RuntimeStats stats = server.stats();
  nb::dict out;
  out["submitted"] = stats.submitted;
  out["steps"] = stats.steps;
  out["admitted"] = stats.admitted;
  out["completed"] = stats.completed;
  out["engine_launches"] = stats.engine_launches;
  out["free_pages"] = stats.free_pages;
  out["reserved_pages"] = stats.reserved_pages;
  return out;
}

}  // namespace
}  // namespace baton

NB_MODULE(_baton, m) {
  using namespace baton;
  m.doc() = "Baton's native runtime (use baton.LLM)";
  nb::register_exception_translator(Translate);

  m.def("_set_error_types", [](nb::dict types) { ErrorTypes() = std::move(types); });
  m.def("defaults", &Defaults,
        "The options' defaults (the C++ ServerOptions{}'s), by option name.");
  m.def("limits", &Limits,
        "What a request may ask of the device (stop tokens, vocabulary, context).");
  m.def(
      "device_count",
      [] {
        int count = 0;
        if (cudaGetDeviceCount(&count) != cudaSuccess) {
          (void)cudaGetLastError();
          count = 0;
        }
        return count;
      },
      "CUDA devices visible to this process (0 without a GPU or a driver).");
  m.def(
      "validate_options",
      [](const std::string& checkpoint, std::uint32_t max_batch, std::uint32_t max_context,
         std::uint32_t max_tokens_per_step, std::uint32_t max_tokens_without_decodes,
         std::uint32_t max_chunk_tokens, std::uint32_t max_requests, const std::string& dtype,
         const std::string& gemm, const std::string& engine, std::uint32_t stream_window,
         std::uint32_t max_logprobs, std::uint32_t tensor_parallel_size) {
        Check(ValidateServerOptions(MakeOptions(checkpoint, max_batch, max_context,
                                                max_tokens_per_step, max_tokens_without_decodes,
                                                max_chunk_tokens, max_requests, dtype, gemm, engine,
                                                stream_window, max_logprobs, tensor_parallel_size)));
      },
      BATON_OPTION_ARGS, "Checks the options without a GPU; raises what Server.create would.");

  nb::class_<Server>(m, "Server")
      .def_static("create", &CreateServer, BATON_OPTION_ARGS,
                  nb::arg("load_progress").none() = nb::none(),
                  "Loads the checkpoint onto the GPU and starts the engine; load_progress(done, "
                  "total) is called as the weights' bytes reach the GPU.")
      .def("submit", &Submit, nb::arg("requests"),
           "Queues [(prompt, max_new_tokens, stop_tokens, temperature, top_k, top_p, seed, "
           "sequence_id, presence_penalty, frequency_penalty, repetition_penalty, min_tokens, "
           "logprobs)], all or none; returns their ids.")
      .def("poll", &Poll, nb::arg("timeout_s"),
           "Waits up to timeout_s for tokens; returns [(id, new_tokens, finished, logprobs)]: "
           "logprobs None, an error message (they were lost), or a (logprob, [(token, "
           "logprob)]) per new token.")
      .def(
          "cancel", [](Server& server, std::uint64_t id) { Check(server.Cancel(id)); },
          nb::arg("id"), "Ends a request at its next token; its finished event follows.")
      .def("pending", &Server::pending)
      .def("info", &Info)
      .def("stats", &Stats)
      .def("close", [](Server& server) {
        absl::Status status;
        {
          nb::gil_scoped_release release;
          status = server.Close();
        }
        Check(status);
      });
}
