/* The producer's copy of the room rule (sluicei_room_ahead, producer/src/
 * room.c) against has_room of common/lua/lib.lua. Redis runs Lua 5.1,
 * whose numbers are doubles: the rule is computed here the way the script
 * computes it, and the C copy must agree on every input of a grid. */
#include "test.h"

#include <math.h>
#include <stdint.h>

#include "producer_impl.h"

/* has_room(count, used, size, maxn, maxb, ahead = true), as Lua does it. */
static int lua_has_room_ahead(double count, double used, double size, double maxn, double maxb)
{
    maxn = fmax(1, floor(maxn * 3 / 4));
    maxb = floor(maxb * 3 / 4);
    return count + 1 <= maxn && used + size <= maxb;
}

static void test_room_fixed(void)
{
    /* 3/4 of a budget of 1 batch is still one batch; of 3, two. */
    CHECK(sluicei_room_ahead(0, 0, 1, 1, 1 << 20));
    CHECK(!sluicei_room_ahead(1, 0, 1, 1, 1 << 20));
    CHECK(sluicei_room_ahead(1, 0, 1, 3, 1 << 20));
    CHECK(!sluicei_room_ahead(2, 0, 1, 3, 1 << 20));
    CHECK(sluicei_room_ahead(2, 0, 1, 4, 1 << 20));
    CHECK(!sluicei_room_ahead(3, 0, 1, 4, 1 << 20));
    /* Bytes: up to exactly 3/4 of the budget, rounded down. */
    CHECK(sluicei_room_ahead(0, 700, 50, 100, 1000));
    CHECK(!sluicei_room_ahead(0, 700, 51, 100, 1000));
    CHECK(sluicei_room_ahead(0, 0, 2, 100, 3));   /* floor(2.25) = 2 */
    CHECK(!sluicei_room_ahead(0, 0, 3, 100, 3));
}

static void test_room_grid(void)
{
    static const int64_t budgets[] = {1, 2, 3, 4, 5, 7, 8, 64, 100, 1001, 1 << 20,
                                      (int64_t)1 << 30, (int64_t)3 << 40};
    int disagree = 0;
    for (size_t a = 0; a < sizeof budgets / sizeof budgets[0]; a++) {
        for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
            int64_t maxn = budgets[a], maxb = budgets[b];
            for (int64_t count = 0; count <= maxn && count < 200; count += 1 + count / 8) {
                for (int64_t used = 0; used <= maxb; used += 1 + used / 3 + maxb / 16) {
                    for (int64_t size = 1; size <= maxb; size += 1 + size + maxb / 8) {
                        int c = sluicei_room_ahead(count, used, size, maxn, maxb);
                        int l = lua_has_room_ahead((double)count, (double)used, (double)size,
                                                   (double)maxn, (double)maxb);
                        if (c != l && disagree++ < 5)
                            fprintf(stderr, "    room: count %lld used %lld size %lld maxn %lld "
                                    "maxb %lld: C %d, Lua %d\n", (long long)count,
                                    (long long)used, (long long)size, (long long)maxn,
                                    (long long)maxb, c, l);
                    }
                }
            }
        }
    }
    CHECK(disagree == 0);
}

const struct test room_tests[] = {
    {"room/the rule's edges", test_room_fixed},
    {"room/the C copy agrees with lib.lua's has_room", test_room_grid},
    {NULL, NULL},
};
