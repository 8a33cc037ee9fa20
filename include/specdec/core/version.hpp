#pragma once

#define SPECDEC_VERSION_MAJOR 0
#define SPECDEC_VERSION_MINOR 1
#define SPECDEC_VERSION_PATCH 0

namespace specdec {
inline constexpr const char* kVersion = "0.1.0";
}
