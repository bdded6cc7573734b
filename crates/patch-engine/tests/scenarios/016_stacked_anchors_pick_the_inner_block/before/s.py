class A:
    def m(self):
        return 'a'

class B:
    def m(self):
        return 'a'
