// Asks for a reduction the collectives do not have.
export default { name: "prod-op", async clip(rank) { return rank.allReduce(rank.group("tp"), 1, "prod"); } };
