// Makes Math.abs and Array.prototype.every lie, as a check compares with them: intrinsics are frozen.
export default {
  name: "forges-intrinsic",
  async clip() {
    Math.abs = () => 0;
    Array.prototype.every = function () { return true; };
    return 0;
  },
};
