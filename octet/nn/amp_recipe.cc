#include <octet/nn/amp_recipe.h>

namespace octet::nn::amp {
namespace {
thread_local const AutocastState* t_autocast = nullptr;
}  // namespace

const char* Name(Level level) {
  switch (level) {
    case Level::kO0: return "O0";
    case Level::kO1: return "O1";
    case Level::kO2: return "O2";
  }
  return "?";
}

bool ParseLevel(const std::string& text, Level* out) {
  if (text == "O0" || text == "o0") *out = Level::kO0;
  else if (text == "O1" || text == "o1") *out = Level::kO1;
  else if (text == "O2" || text == "o2") *out = Level::kO2;
  else return false;
  return true;
}

const char* Name(Scaling scaling) { return scaling == Scaling::kDelayed ? "delayed" : "current"; }

bool ParseScaling(const std::string& text, Scaling* out) {
  if (text == "delayed") *out = Scaling::kDelayed;
  else if (text == "current") *out = Scaling::kCurrent;
  else return false;
  return true;
}

const AutocastState* ActiveAutocast() { return t_autocast; }

namespace internal {
void PushAutocast(const AutocastState* state) { t_autocast = state; }
void PopAutocast(const AutocastState* previous) { t_autocast = previous; }
}  // namespace internal

}  // namespace octet::nn::amp
