#!lua
-- create: ARGV max_batches, max_bytes, now_us, ranks, remainder,
-- lease_ms, max_deliveries, and for a partition of a partitioned queue
-- partitions, partition. ranks 0 is a free queue; ranks N > 0 a
-- coordinated queue of N ranks whose last round is 'drop'ped or 'pad'ded.
-- The same call sent again (its reply was lost) finds its own queue by
-- now_us and succeeds again.
local meta = KEYS[1]
local pre = string.sub(meta, 1, -5)
redis.call('EXISTS', meta, pre .. 'guard')   -- migration guard (lib.lua)
if redis.call('EXISTS', meta) == 1 then
  if redis.call('HGET', meta, 'created_us') == ARGV[3] then return 1 end
  return redis.error_reply('EXISTS queue exists already')
end
redis.call('HSET', meta, 'version', 1, 'max_batches', ARGV[1], 'max_bytes', ARGV[2],
           'created_us', ARGV[3], 'ranks', ARGV[4], 'remainder', ARGV[5],
           'lease_ms', ARGV[6], 'max_deliveries', ARGV[7])
if ARGV[8] and ARGV[8] ~= '' then
  redis.call('HSET', meta, 'partitions', ARGV[8], 'partition', ARGV[9])
end
redis.call('SET', pre .. 'bytes', 0)
return 1
