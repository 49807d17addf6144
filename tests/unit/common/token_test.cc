// Bearer tokens (common/token.h): the constant-time comparison and the
// `authorization: Bearer <token>` header check of the token gate.
#include "common/token.h"

#include <gtest/gtest.h>

namespace psync {
namespace {

TEST(TokenEquals, ExactMatchOnly) {
  EXPECT_TRUE(TokenEquals("s3cret", "s3cret"));
  EXPECT_FALSE(TokenEquals("s3cre", "s3cret"));     // prefix
  EXPECT_FALSE(TokenEquals("s3cret!", "s3cret"));   // longer
  EXPECT_FALSE(TokenEquals("s3cret", "S3cret"));
  EXPECT_FALSE(TokenEquals("s3crets3cret", "s3cret"));  // the secret repeated (it is cycled internally)
  EXPECT_FALSE(TokenEquals("", "s3cret"));
  EXPECT_FALSE(TokenEquals("", ""));                // an empty secret never matches
  EXPECT_FALSE(TokenEquals("x", ""));
}

TEST(BearerTokenMatches, NeedsTheSchemeAndTheExactToken) {
  EXPECT_TRUE(BearerTokenMatches("Bearer s3cret", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("s3cret", "s3cret"));          // no scheme
  EXPECT_FALSE(BearerTokenMatches("bearer s3cret", "s3cret"));   // the scheme as sent by psync clients
  EXPECT_FALSE(BearerTokenMatches("Bearer  s3cret", "s3cret"));  // one space
  EXPECT_FALSE(BearerTokenMatches("Bearer s3cre", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("Bearer ", ""));
}

}  // namespace
}  // namespace psync
