// Typed errors. Every user mistake the library detects throws one of these,
// with a message that says what was expected and what was got.
#pragma once

#include <stdexcept>
#include <string>

namespace specdec {

// Base of everything specdec throws on bad input.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A parameter outside its documented domain (temperature < 0, top_p > 1, ...).
class InvalidArgumentError : public Error {
 public:
  using Error::Error;
};

// Sizes or shapes that disagree (vocabulary sizes, row counts, dimensions).
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A probability row or logit row that is empty, non-finite, negative, or does
// not sum to one.
class InvalidDistributionError : public Error {
 public:
  using Error::Error;
};

// A draft tree that is not topologically ordered or refers to missing nodes.
class InvalidTreeError : public Error {
 public:
  using Error::Error;
};

// Memory or dtype the caller handed over that this component cannot use.
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

// A checkpoint or config file that is missing, unreadable or malformed (bad
// header, inconsistent offsets, missing field, ...). The message names the file.
class ModelLoadError : public Error {
 public:
  using Error::Error;
};

// A file that could not be written (directory missing, disk full, rename failed).
class IoError : public Error {
 public:
  using Error::Error;
};

// A tokenizer file that is missing, malformed, or uses a feature this library
// does not implement; also token ids outside the vocabulary. The message names
// the file (when there is one) and the problem.
class TokenizerError : public Error {
 public:
  using Error::Error;
};

// A device runtime call that failed (CUDA: an allocation, a copy, a launch,
// a kernel's fault seen at a synchronisation). The message names the call and
// the runtime's own description.
class DeviceError : public Error {
 public:
  using Error::Error;
};

}  // namespace specdec
