// NOTE [environment switches] (env.h).
#include <octet/core/env.h>

#include <cstdlib>
#include <string>

#include <octet/core/error.h>

namespace octet::internal {

int ParseEnvChoice(std::string_view name, const char* text, std::span<const EnvValue> values, int fallback) {
  if (text == nullptr || text[0] == '\0') return fallback;
  const std::string_view given(text);
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].value == given) return static_cast<int>(i);
  std::string choices;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) choices += i + 1 == values.size() ? " or " : ", ";
    choices.append(values[i].value).append(" (").append(values[i].meaning).append(")");
  }
  OCTET_FAIL(name, "='", given, "' is not understood: use ", choices);
}

int ReadEnvChoice(const char* name, std::span<const EnvValue> values, int fallback) {
  return ParseEnvChoice(name, std::getenv(name), values, fallback);
}

}  // namespace octet::internal
